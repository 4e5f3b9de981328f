//! Slurm hostlists: `gpu[001-004]`, `a[1-2]b[3-4]`, `n[9-11],login1`.
//!
//! [`expand`] behaves like `scontrol show hostnames`, [`compress`] like
//! `scontrol show hostlist` and [`compress_sorted`] like `scontrol show hostlistsorted`
//! (Slurm 22.05; checked name for name against the real `scontrol` by
//! `crds/tests/slurm_hostlist_oracle.rs`).
//!
//! # Grammar (what Slurm accepts)
//! - Items are separated by `,`, space or tab; empty items are skipped (`a, b` is `a` and `b`).
//! - An item is a literal name (`login1`) or text with bracketed range lists:
//!   `gpu[001-003,010]`. A range is `N` or `LO-HI` (`LO <= HI`); the width of `LO` sets the
//!   zero padding of every number of the range (`n[09-11]` → `n09 n10 n11`, `n[9-011]` →
//!   `n9 n10 n11`, `n[001-5]` → `n001`…`n005`).
//! - Several bracket lists multiply out: `a[1-2]b[3-4]` → `a1b3 a1b4 a2b3 a2b4`. The last
//!   bracket varies fastest, then the first, second, … (Slurm's order: `a[1-2]b[3-4]c[5-6]` →
//!   `a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 …`).
//! - Nothing may follow the last `]` (`a[1-3]b` is refused, by Slurm too).
//! - Limits (Slurm's): at most [`MAX_RANGE`] hosts in one range, [`MAX_RANGES`] ranges in one
//!   bracket, [`MAX_PREFIX_COUNT`] hosts in a bracket that is not the last. Ours on top: at
//!   most [`MAX_HOSTS`] names in all.
//!
//! # Refused although Slurm 22.05 accepts it
//! Slurm's parser is lenient in ways that produce surprising names; we refuse instead:
//! unbalanced or nested brackets (`a[1-3` gives Slurm's `a]`, `a]b[1-2]` gives `a]b1`),
//! anything but digits in a range (Slurm reads `x[1a-3]`, `x[+1-3]` and `x[ 1-3]` as `x01-x03`,
//! `a[1-]` as `a1`), numbers of 2^64-1 and more (Slurm saturates `a[99999999999999999999]` to
//! `a18446744073709551615`), control characters (Slurm keeps a newline inside a name), and
//! expansions beyond [`MAX_HOSTS`] names.
//!
//! # Compressing
//! A name splits into a prefix and its trailing decimal digits (`gpu007` → `gpu` + `007`,
//! width 3). Runs of consecutive numbers with the same prefix and compatible zero padding
//! become ranges; consecutive ranges with the same prefix share one bracket list
//! (`n[1-3,7]`). Padding is compatible when it prints the numbers the same way: `n9,n10`
//! becomes `n[9-10]`, but `n08,n9` stays `n[08,9]`. [`compress`] keeps the input order and
//! duplicates (`tux2,tux1,tux2` → `tux[2,1-2]`), as `scontrol show hostlist` does.
//! A name whose digit suffix does not fit in 64 bits is kept verbatim (Slurm mangles it).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, parse_digits_u64, serde_via_string};

const WHAT: &str = "hostlist";

/// Most hosts in one range such as `[1-65536]` (Slurm's `MAX_RANGE`).
pub const MAX_RANGE: u64 = 64 * 1024;
/// Most comma-separated ranges inside one bracket (Slurm's `MAX_RANGES`).
pub const MAX_RANGES: usize = 64 * 1024;
/// Most hosts in a bracket that is followed by another bracket (Slurm's `MAX_PREFIX_CNT`).
pub const MAX_PREFIX_COUNT: u64 = 64 * 1024;
/// Most names [`expand`] produces in all (Muster's limit; Slurm has none and will happily
/// print 4 billion names for `a[0-65535]b[0-65535]`).
pub const MAX_HOSTS: usize = 1 << 20;

fn is_separator(c: char) -> bool {
    matches!(c, ',' | ' ' | '\t')
}

/// Expands a hostlist into host names, in Slurm's order, keeping duplicates — exactly what
/// `scontrol show hostnames` prints (see the [module docs](self) for the grammar and for the
/// malformed inputs we refuse).
///
/// ```
/// use muster_crds::slurm::hostlist::expand;
/// assert_eq!(expand("gpu[001-003,010]").unwrap(), ["gpu001", "gpu002", "gpu003", "gpu010"]);
/// assert_eq!(expand("n[9-11],login").unwrap(), ["n9", "n10", "n11", "login"]);
/// assert!(expand("a[1-3]b").is_err());
/// ```
pub fn expand(s: &str) -> Result<Vec<String>, SyntaxError> {
    let items = tokenize(s)?;
    // Validate and size everything before allocating any name.
    let mut parsed = Vec::with_capacity(items.len());
    let mut total: usize = 0;
    for (col, item) in items {
        let p = parse_item(s, col, item)?;
        total = total.saturating_add(p.count());
        if total > MAX_HOSTS {
            return Err(SyntaxError::new(
                WHAT,
                s,
                format!("expands to more than {MAX_HOSTS} host names"),
            ));
        }
        parsed.push(p);
    }
    let mut names = Vec::with_capacity(total);
    for p in &parsed {
        p.expand_into(&mut names);
    }
    Ok(names)
}

/// Splits a hostlist into items at separators outside brackets; checks bracket balance and
/// characters. Returns each item with its 1-based column.
fn tokenize(s: &str) -> Result<Vec<(usize, &str)>, SyntaxError> {
    let err = |msg: String| SyntaxError::new(WHAT, s, msg);
    let mut items = Vec::new();
    let mut start: Option<(usize, usize)> = None; // (column, byte) of the current item
    let mut open: Option<usize> = None; // column of an unclosed '['
    for (col0, (i, c)) in s.char_indices().enumerate() {
        let col = col0 + 1;
        if c.is_control() && c != '\t' {
            return Err(err(format!(
                "control character {c:?} at column {col}; host names cannot contain one"
            )));
        }
        if open.is_none() && is_separator(c) {
            if let Some((c0, b)) = start.take() {
                items.push((c0, &s[b..i]));
            }
            continue;
        }
        if start.is_none() {
            start = Some((col, i));
        }
        match c {
            '[' if open.is_some() => {
                return Err(err(format!(
                    "nested '[' at column {col}; brackets cannot nest, e.g. write a[1-3]"
                )));
            }
            '[' => open = Some(col),
            ']' if open.is_none() => {
                return Err(err(format!(
                    "unbalanced ']' at column {col}; a range list is written [1-3,7]"
                )));
            }
            ']' => open = None,
            _ => {}
        }
    }
    if let Some(col) = open {
        return Err(err(format!(
            "unbalanced '[' at column {col}; a range list is written [1-3,7]"
        )));
    }
    if let Some((c0, b)) = start {
        items.push((c0, &s[b..]));
    }
    Ok(items)
}

/// One number range inside brackets: `lo..=hi`, printed zero-padded to `width`.
#[derive(Clone, Copy, Debug)]
struct NumRange {
    lo: u64,
    hi: u64,
    width: usize,
}

impl NumRange {
    fn count(&self) -> u64 {
        self.hi - self.lo + 1
    }
}

/// A parsed item: literal pieces around bracket lists.
/// `lits.len() == brackets.len() + 1`, and the last literal is empty when there are brackets.
struct Item<'a> {
    lits: Vec<&'a str>,
    brackets: Vec<Vec<NumRange>>,
}

impl Item<'_> {
    fn bracket_count(b: &[NumRange]) -> u64 {
        b.iter()
            .map(NumRange::count)
            .fold(0u64, u64::saturating_add)
    }

    fn count(&self) -> usize {
        self.brackets
            .iter()
            .map(|b| usize::try_from(Self::bracket_count(b)).unwrap_or(usize::MAX))
            .fold(1usize, usize::saturating_mul)
    }

    fn expand_into(&self, out: &mut Vec<String>) {
        if self.brackets.is_empty() {
            out.push(self.lits[0].to_string());
            return;
        }
        // The numbers of each bracket, formatted once. Bounded: count() <= MAX_HOSTS.
        let values: Vec<Vec<String>> = self
            .brackets
            .iter()
            .map(|ranges| {
                ranges
                    .iter()
                    .flat_map(|r| (r.lo..=r.hi).map(move |n| format!("{n:0w$}", w = r.width)))
                    .collect()
            })
            .collect();
        let k = values.len();
        // Slurm's nesting, fastest first: the last bracket, then the first, second, ...
        let order: Vec<usize> = std::iter::once(k - 1).chain(0..k - 1).collect();
        let mut idx = vec![0usize; k];
        loop {
            let mut name = String::new();
            for (j, lit) in self.lits.iter().enumerate() {
                name.push_str(lit);
                if j < k {
                    name.push_str(&values[j][idx[j]]);
                }
            }
            out.push(name);
            // Odometer step in Slurm's order.
            let mut carried_out = true;
            for &j in &order {
                idx[j] += 1;
                if idx[j] < values[j].len() {
                    carried_out = false;
                    break;
                }
                idx[j] = 0;
            }
            if carried_out {
                break;
            }
        }
    }
}

/// Parses one item (already known to have balanced, non-nested brackets).
fn parse_item<'a>(whole: &str, col: usize, item: &'a str) -> Result<Item<'a>, SyntaxError> {
    let err = |msg: String| SyntaxError::new(WHAT, whole, msg);
    let mut lits = Vec::new();
    let mut brackets = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = match rest[open..].find(']') {
            Some(c) => open + c,
            None => return Err(err(format!("unbalanced '[' in {item:?}"))),
        };
        lits.push(&rest[..open]);
        let body = &rest[open + 1..close];
        brackets.push(parse_ranges(whole, body)?);
        rest = &rest[close + 1..];
    }
    if !brackets.is_empty() && !rest.is_empty() {
        return Err(err(format!(
            "{rest:?} after the last ']' in {item:?} (column {col}); Slurm allows ranges only at \
             the end of a name or between its parts, e.g. a[1-3] or a[1-2]b[1-3]"
        )));
    }
    lits.push(rest);
    for (i, b) in brackets.iter().enumerate() {
        if i + 1 < brackets.len() && Item::bracket_count(b) > MAX_PREFIX_COUNT {
            return Err(err(format!(
                "more than {MAX_PREFIX_COUNT} hosts in a bracket followed by another bracket \
                 in {item:?}"
            )));
        }
    }
    Ok(Item { lits, brackets })
}

fn parse_ranges(whole: &str, body: &str) -> Result<Vec<NumRange>, SyntaxError> {
    let err = |msg: String| SyntaxError::new(WHAT, whole, msg);
    let mut out = Vec::new();
    for part in body.split(',') {
        if out.len() == MAX_RANGES {
            return Err(err(format!("more than {MAX_RANGES} ranges in [{body}]")));
        }
        let bad = || {
            err(format!(
                "invalid range {part:?} in [{body}]; a range is N or LO-HI with decimal digits, \
                 e.g. [1-4,7,010-012]"
            ))
        };
        let (lo_s, hi_s) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let num = |d: &str| -> Result<u64, SyntaxError> {
            if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            // u64::MAX is Slurm's "empty range" marker; refuse it with the overflows.
            parse_digits_u64(d)
                .filter(|v| *v < u64::MAX)
                .ok_or_else(|| {
                    err(format!(
                        "number {d} in [{body}] is too large (below 2^64-1)"
                    ))
                })
        };
        let (lo, hi) = (num(lo_s)?, num(hi_s)?);
        if lo > hi {
            return Err(err(format!(
                "range {part:?} in [{body}] is reversed; write LO-HI with LO <= HI"
            )));
        }
        if hi - lo + 1 > MAX_RANGE {
            return Err(err(format!(
                "too many hosts in range {part:?} (at most {MAX_RANGE} in one range)"
            )));
        }
        out.push(NumRange {
            lo,
            hi,
            width: lo_s.len(),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Compression
// ---------------------------------------------------------------------------------------

/// A run of hosts: `prefix` + numbers `lo..=hi` padded to `width`, or one name without a
/// numeric suffix (`single`, where `prefix` is the whole name).
#[derive(Clone, Debug)]
struct HostRange<'a> {
    prefix: &'a str,
    lo: u64,
    hi: u64,
    width: usize,
    single: bool,
}

impl<'a> HostRange<'a> {
    fn of_name(name: &'a str) -> Self {
        let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
        let (prefix, suffix) = name.split_at(name.len() - digits);
        match parse_digits_u64(suffix).filter(|v| *v < u64::MAX) {
            Some(n) => HostRange {
                prefix,
                lo: n,
                hi: n,
                width: digits,
                single: false,
            },
            None => HostRange {
                prefix: name,
                lo: 0,
                hi: 0,
                width: 0,
                single: true,
            },
        }
    }

    /// Slurm's `hostrange_prefix_cmp`: natural order of prefixes, then names without a
    /// number before ranges.
    fn prefix_cmp(&self, other: &Self) -> Ordering {
        strnatcmp(self.prefix.as_bytes(), other.prefix.as_bytes())
            .then_with(|| other.single.cmp(&self.single))
    }

    /// Whether two ranges go in the same bracket list (Slurm's `hostrange_within_range`).
    fn same_bracket(&self, other: &Self) -> bool {
        self.prefix_cmp(other) == Ordering::Equal && !self.single && !other.single
    }
}

/// Number of zeros Slurm pads `num` with at `width`.
fn zero_padded(num: u64, width: usize) -> usize {
    let digits = num.checked_ilog10().map_or(1, |l| l as usize + 1);
    width.saturating_sub(digits)
}

/// Slurm's `_width_equiv`: whether numbers printed at widths `wn` and `wm` can share a range;
/// if so, makes the widths agree (as Slurm does, in place).
fn width_equiv(n: u64, wn: &mut usize, m: u64, wm: &mut usize) -> bool {
    if *wn == *wm {
        return true;
    }
    let (npad, nmpad) = (zero_padded(n, *wn), zero_padded(n, *wm));
    let (mpad, mnpad) = (zero_padded(m, *wm), zero_padded(m, *wn));
    if npad != nmpad && mpad != mnpad {
        false
    } else {
        if npad != nmpad {
            *wm = *wn;
        } else {
            *wn = *wm;
        }
        true
    }
}

/// Appends `hr`, extending the last range when `hr` continues it (Slurm's
/// `hostlist_push_range`).
fn push_range<'a>(ranges: &mut Vec<HostRange<'a>>, mut hr: HostRange<'a>) {
    if let Some(tail) = ranges.last_mut()
        && !tail.single
        && !hr.single
        && tail.hi.checked_add(1) == Some(hr.lo)
        && tail.prefix_cmp(&hr) == Ordering::Equal
        && width_equiv(tail.lo, &mut tail.width, hr.lo, &mut hr.width)
    {
        tail.hi = hr.hi;
        return;
    }
    ranges.push(hr);
}

/// Slurm's `hostrange_cmp` as a total order: prefix (natural order), names without a number
/// first, then zero-padding width, then number. (Slurm compares numbers when the widths are
/// compatible and widths otherwise; for widths that are at least the digit count of the
/// number, as for every parsed name, that is exactly this order.)
fn range_order(a: &HostRange, b: &HostRange) -> Ordering {
    a.prefix_cmp(b)
        .then_with(|| a.width.cmp(&b.width))
        .then_with(|| a.lo.cmp(&b.lo))
        .then_with(|| a.prefix.cmp(b.prefix))
}

/// Slurm's `hostlist_uniq`: sort, then merge overlapping and adjacent ranges.
fn sort_uniq(ranges: &mut Vec<HostRange<'_>>) {
    ranges.sort_by(range_order);
    let mut out: Vec<HostRange> = Vec::with_capacity(ranges.len());
    for mut hr in ranges.drain(..) {
        if let Some(prev) = out.last_mut()
            && prev.prefix_cmp(&hr) == Ordering::Equal
            && width_equiv(prev.lo, &mut prev.width, hr.lo, &mut hr.width)
        {
            if prev.single && hr.single {
                continue; // the same name again
            }
            if prev.hi.checked_add(1) == Some(hr.lo) || prev.hi >= hr.lo {
                prev.hi = prev.hi.max(hr.hi);
                continue;
            }
        }
        out.push(hr);
    }
    *ranges = out;
}

/// Slurm's `hostlist_ranged_string`.
fn format_ranges(ranges: &[HostRange]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < ranges.len() {
        if i > 0 {
            out.push(',');
        }
        let first = &ranges[i];
        out.push_str(first.prefix);
        if first.single {
            i += 1;
            continue;
        }
        let bracket =
            first.hi > first.lo || ranges.get(i + 1).is_some_and(|n| first.same_bracket(n));
        if bracket {
            out.push('[');
        }
        loop {
            let r = &ranges[i];
            out.push_str(&format!("{:0w$}", r.lo, w = r.width));
            if r.hi > r.lo {
                out.push_str(&format!("-{:0w$}", r.hi, w = r.width));
            }
            i += 1;
            if i < ranges.len() && ranges[i].same_bracket(&ranges[i - 1]) {
                out.push(',');
            } else {
                break;
            }
        }
        if bracket {
            out.push(']');
        }
    }
    out
}

/// Compresses host names into a hostlist, keeping their order and duplicates — exactly what
/// `scontrol show hostlist` prints (Slurm 22.05 neither sorts nor de-duplicates there).
///
/// Names must not contain separators (`,`, space, tab) or brackets; [`HostList::from_names`]
/// checks that.
///
/// ```
/// use muster_crds::slurm::hostlist::compress;
/// assert_eq!(compress(["gpu001", "gpu002", "gpu003", "gpu010"]), "gpu[001-003,010]");
/// assert_eq!(compress(["n9", "n10", "n11", "login"]), "n[9-11],login");
/// assert_eq!(compress(["tux2", "tux1", "tux2"]), "tux[2,1-2]");
/// ```
pub fn compress<I, S>(names: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let names: Vec<S> = names.into_iter().collect();
    let mut ranges = Vec::with_capacity(names.len());
    for n in &names {
        push_range(&mut ranges, HostRange::of_name(n.as_ref()));
    }
    format_ranges(&ranges)
}

/// Compresses host names into a sorted hostlist without duplicates: names sort by prefix in
/// natural order (`a9b` before `a10b`), then by zero-padding width, then by number.
///
/// Repeated names are dropped first (the first one stays); from there this is exactly
/// `scontrol show hostlistsorted`, which itself keeps duplicates (`tux2,tux1,tux2` →
/// `tux[1-2,2]`) where this gives `tux[1-2]`. As in Slurm, ranges form in input order before
/// sorting, so where zero padding differs the result can depend on the order:
/// `n99,n100,n099` → `n[99-100,099]` but `n99,n099,n100` → `n[99,099-100]`.
///
/// ```
/// use muster_crds::slurm::hostlist::compress_sorted;
/// assert_eq!(compress_sorted(["n10", "n9", "n1", "n9"]), "n[1,9-10]");
/// assert_eq!(compress_sorted(["a10b1", "a9b2", "a9b1"]), "a9b[1-2],a10b1");
/// ```
pub fn compress_sorted<I, S>(names: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let names: Vec<S> = names.into_iter().collect();
    // Drop repeats first: a name could otherwise sit in two ranges of different widths
    // (`node-99,node-100` and `node-100` with width 3), which sorting would not merge.
    let mut seen = std::collections::HashSet::new();
    let mut ranges = Vec::with_capacity(names.len());
    for n in &names {
        if seen.insert(n.as_ref()) {
            push_range(&mut ranges, HostRange::of_name(n.as_ref()));
        }
    }
    sort_uniq(&mut ranges);
    format_ranges(&ranges)
}

/// Natural-order comparison with the semantics of `strnatcmp` (Martin Pool's, which Slurm
/// uses to sort hostlist prefixes): runs of digits compare by value (`a9` < `a10`), runs
/// starting with `0` compare digit by digit (as fractions), white space is skipped, bytes
/// compare as signed `char`s.
fn strnatcmp(a: &[u8], b: &[u8]) -> Ordering {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let is_space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let (mut ai, mut bi) = (0, 0);
    loop {
        let (mut ca, mut cb) = (at(a, ai), at(b, bi));
        while is_space(ca) {
            ai += 1;
            ca = at(a, ai);
        }
        while is_space(cb) {
            bi += 1;
            cb = at(b, bi);
        }
        if ca.is_ascii_digit() && cb.is_ascii_digit() {
            let r = if ca == b'0' || cb == b'0' {
                compare_left(&a[ai..], &b[bi..])
            } else {
                compare_right(&a[ai..], &b[bi..])
            };
            if r != Ordering::Equal {
                return r;
            }
        }
        if ca == 0 && cb == 0 {
            return Ordering::Equal;
        }
        match (ca as i8).cmp(&(cb as i8)) {
            Ordering::Equal => {}
            other => return other,
        }
        ai += 1;
        bi += 1;
    }
}

/// Right-aligned digit runs: the longer run wins, else the first difference.
fn compare_right(a: &[u8], b: &[u8]) -> Ordering {
    let mut bias = Ordering::Equal;
    for i in 0.. {
        let (ca, cb) = (a.get(i).copied(), b.get(i).copied());
        let (da, db) = (
            ca.is_some_and(|c| c.is_ascii_digit()),
            cb.is_some_and(|c| c.is_ascii_digit()),
        );
        match (da, db) {
            (false, false) => return bias,
            (false, true) => return Ordering::Less,
            (true, false) => return Ordering::Greater,
            (true, true) => {
                if bias == Ordering::Equal {
                    bias = ca.cmp(&cb);
                }
            }
        }
    }
    bias
}

/// Left-aligned digit runs (fractions): the first difference wins.
fn compare_left(a: &[u8], b: &[u8]) -> Ordering {
    for i in 0.. {
        let (ca, cb) = (a.get(i).copied(), b.get(i).copied());
        let (da, db) = (
            ca.is_some_and(|c| c.is_ascii_digit()),
            cb.is_some_and(|c| c.is_ascii_digit()),
        );
        match (da, db) {
            (false, false) => return Ordering::Equal,
            (false, true) => return Ordering::Less,
            (true, false) => return Ordering::Greater,
            (true, true) => match ca.cmp(&cb) {
                Ordering::Equal => {}
                other => return other,
            },
        }
    }
    Ordering::Equal
}

/// An ordered list of host names that reads and prints as a Slurm hostlist.
///
/// `FromStr`/[`HostList::parse`] expand (like `scontrol show hostnames`), `Display`
/// compresses keeping the order (like `scontrol show hostlist`), serde uses the compressed
/// string. `parse(h.to_string()) == h` for every list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HostList {
    names: Vec<String>,
}

impl HostList {
    /// Expands a hostlist string.
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        Ok(HostList { names: expand(s)? })
    }

    /// A list of these names, in this order. Each name must be non-empty and free of
    /// separators (`,`, space, tab), brackets and control characters.
    pub fn from_names<I, S>(names: I) -> Result<Self, SyntaxError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        for n in &names {
            if n.is_empty()
                || n.chars()
                    .any(|c| is_separator(c) || c == '[' || c == ']' || c.is_control())
            {
                return Err(SyntaxError::new(
                    "host name",
                    n,
                    "a host name must be non-empty, without ',', ' ', '[', ']' or control \
                     characters",
                ));
            }
        }
        Ok(HostList { names })
    }

    /// The names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The names, in order.
    pub fn into_names(self) -> Vec<String> {
        self.names
    }

    /// Number of names (duplicates counted).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no names.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The first name: what `scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1` gives.
    pub fn first(&self) -> Option<&str> {
        self.names.first().map(String::as_str)
    }

    /// The compressed form with names sorted and de-duplicated ([`compress_sorted`]).
    pub fn to_sorted_string(&self) -> String {
        compress_sorted(&self.names)
    }
}

impl fmt::Display for HostList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&compress(&self.names))
    }
}

impl FromStr for HostList {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl<'a> IntoIterator for &'a HostList {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.names.iter()
    }
}

serde_via_string!(HostList, "a Slurm hostlist such as \"gpu[001-004]\"");

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> Vec<String> {
        expand(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn expands_facts_md_and_man_page_examples() {
        assert_eq!(ex("gpu[001-004]"), ["gpu001", "gpu002", "gpu003", "gpu004"]);
        assert_eq!(
            ex("gpu[001-003,010]"),
            ["gpu001", "gpu002", "gpu003", "gpu010"]
        );
        assert_eq!(ex("n[9-11]"), ["n9", "n10", "n11"]);
        assert_eq!(ex("n[09-11]"), ["n09", "n10", "n11"]);
        assert_eq!(ex("n[9-011]"), ["n9", "n10", "n11"]);
        assert_eq!(ex("a[01-3,5]"), ["a01", "a02", "a03", "a5"]);
        assert_eq!(ex("[1-3]"), ["1", "2", "3"]);
        assert_eq!(ex("a[1-1]"), ["a1"]);
        assert_eq!(ex("n1x2[3-4]"), ["n1x23", "n1x24"]);
    }

    #[test]
    fn several_brackets_in_slurm_order() {
        assert_eq!(ex("a[1-2]b[3-4]"), ["a1b3", "a1b4", "a2b3", "a2b4"]);
        assert_eq!(ex("a[1-2][3-4]"), ["a13", "a14", "a23", "a24"]);
        assert_eq!(
            ex("a[1-2]b[3-4]c[5-6]"),
            [
                "a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"
            ]
        );
        assert_eq!(
            ex("a[1-2]b[3-4],c[5-6]"),
            ["a1b3", "a1b4", "a2b3", "a2b4", "c5", "c6"]
        );
    }

    #[test]
    fn separators_and_duplicates() {
        assert_eq!(ex("b,a,a"), ["b", "a", "a"]);
        assert_eq!(ex("a b\tc"), ["a", "b", "c"]);
        assert_eq!(ex("a,,b, c,"), ["a", "b", "c"]);
        assert_eq!(ex(""), Vec::<String>::new());
        assert_eq!(ex(" , "), Vec::<String>::new());
        assert_eq!(ex("a[1-2] b"), ["a1", "a2", "b"]);
    }

    #[test]
    fn refuses_what_slurm_refuses() {
        for bad in [
            "a[1-3]b",
            "a[3-1]",
            "a[]",
            "a[-1]",
            "a[1--3]",
            "a[1-2]-x",
            "a[1,]",
            "a[,1]",
            "a[0x10]",
            "a[1-2]]",
            "a[[1-2]]",
            "a[0-65536]",
            "a[2-1]b[1-2]",
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_what_slurm_garbles() {
        for bad in [
            "a[1-3",
            "a]b[1-2]",
            "a1-3]",
            "x[1a-3]",
            "x[+1-3]",
            "x[ 1-3]",
            "a[1-]",
            "a[1 -2]",
            "a\nb",
            "a[99999999999999999999]",
            "a[18446744073709551615]",
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits() {
        assert_eq!(expand("a[0-65535]").unwrap().len(), 65_536);
        assert_eq!(expand("a[0-1024]b[1]").unwrap().len(), 1025);
        let e = expand("a[0-65536]").unwrap_err();
        assert!(e.message.contains("too many hosts in range"), "{e}");
        assert!(expand("a[0-65535,0-1]b[1]").is_err());
        assert_eq!(
            expand("a[0-9]b[0-9]c[0-9]d[0-9]e[0-9]f[0-9]")
                .unwrap()
                .len(),
            1_000_000
        );
        let e = expand("a[0-65535]b[0-65535]").unwrap_err();
        assert!(e.message.contains("more than 1048576"), "{e}");
    }

    #[test]
    fn error_messages_point_at_the_problem() {
        let msg = |s| expand(s).unwrap_err().to_string();
        assert_eq!(
            msg("gpu[1-3"),
            "invalid hostlist \"gpu[1-3\": unbalanced '[' at column 4; a range list is written \
             [1-3,7]"
        );
        assert!(msg("a[3-1]").contains("range \"3-1\" in [3-1] is reversed"));
        assert!(msg("a[1-3]b").contains("\"b\" after the last ']'"));
        assert!(msg("x[1a-3]").contains("invalid range \"1a-3\""));
    }

    #[test]
    fn compresses_like_scontrol_show_hostlist() {
        // Recorded from Slurm 22.05 `scontrol show hostlist`.
        let c = |s: &str| compress(s.split(','));
        assert_eq!(c("tux2,tux1,tux2"), "tux[2,1-2]");
        assert_eq!(c("b,a,a"), "b,a,a");
        assert_eq!(c("n9,n10,n11"), "n[9-11]");
        assert_eq!(c("n09,n10"), "n[09-10]");
        assert_eq!(c("n9,n010"), "n[9,010]");
        assert_eq!(c("n1,n01"), "n[1,01]");
        assert_eq!(c("n001,n002,n003,n010"), "n[001-003,010]");
        assert_eq!(c("a1b3,a1b4,a2b3"), "a1b[3-4],a2b3");
        assert_eq!(c("gpu001,gpu002,gpu004,cpu1"), "gpu[001-002,004],cpu1");
        assert_eq!(c("n10,n9"), "n[10,9]");
        assert_eq!(c("x,x"), "x,x");
        assert_eq!(c("n1,n2,m1,n3"), "n[1-2],m1,n3");
        assert_eq!(c("a,b1,b2,a"), "a,b[1-2],a");
        assert_eq!(c("a01,a1,a2"), "a[01,1-2]");
        assert_eq!(c("n08,n9,n10"), "n[08,9-10]");
        assert_eq!(c("n8,n09"), "n[8,09]");
        assert_eq!(c("1,2,3"), "[1-3]");
        assert_eq!(compress(Vec::<String>::new()), "");
    }

    #[test]
    fn compresses_sorted_like_scontrol_show_hostlistsorted() {
        let c = |s: &str| compress_sorted(s.split(','));
        assert_eq!(c("b,a"), "a,b");
        assert_eq!(c("n10,n9,n1"), "n[1,9-10]");
        assert_eq!(c("n2,m1,n1"), "m1,n[1-2]");
        assert_eq!(c("a10b1,a9b2,a9b1"), "a9b[1-2],a10b1");
        assert_eq!(c("n1,n01,n001"), "n[1,01,001]");
        assert_eq!(c("x,X,a"), "X,a,x");
        assert_eq!(c("a2,a10,a1b,a"), "a,a[2,10],a1b");
        // Where hostlistsorted keeps duplicates ("tux[1-2,2]", "a,a,a1"), we drop them.
        assert_eq!(c("tux2,tux1,tux2"), "tux[1-2]");
        assert_eq!(c("a,a1,a"), "a,a1");
        // Slurm 22.05 hostlistsorted gives node-[99,000,100] for the distinct names.
        assert_eq!(c("node-100,node-000,node-99,node-100"), "node-[99,000,100]");
    }

    #[test]
    fn huge_suffixes_stay_verbatim() {
        // Slurm prints x00018446744073709551615 here.
        assert_eq!(
            compress(["x99999999999999999999999"]),
            "x99999999999999999999999"
        );
        assert_eq!(
            expand(&compress(["x99999999999999999999999", "x1"])).unwrap(),
            ["x99999999999999999999999", "x1"]
        );
    }

    #[test]
    fn natural_order() {
        use Ordering::*;
        let c = |a: &str, b: &str| strnatcmp(a.as_bytes(), b.as_bytes());
        assert_eq!(c("a9b", "a10b"), Less);
        assert_eq!(c("a01b", "a1b"), Less);
        assert_eq!(c("X", "a"), Less);
        assert_eq!(c("rack2-", "rack10-"), Less);
        assert_eq!(c("abc", "abc"), Equal);
        assert_eq!(c("ab", "abc"), Less);
        // Only runs starting with 0 compare as fractions: 5 < 25 here.
        assert_eq!(c("a1.5", "a1.25"), Less);
        assert_eq!(c("a1.05", "a1.1"), Less);
    }

    #[test]
    fn hostlist_type() {
        let h: HostList = "gpu[001-004]".parse().unwrap();
        assert_eq!(h.len(), 4);
        assert_eq!(h.first(), Some("gpu001"));
        assert_eq!(h.to_string(), "gpu[001-004]");
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"gpu[001-004]\"");
        let back: HostList = serde_json::from_str("\"gpu[001-004]\"").unwrap();
        assert_eq!(back, h);
        assert!(HostList::from_names(["a,b"]).is_err());
        assert!(HostList::from_names([""]).is_err());
        let h = HostList::from_names(["n2", "n1"]).unwrap();
        assert_eq!(h.to_string(), "n[2,1]");
        assert_eq!(h.to_sorted_string(), "n[1-2]");
    }
}
