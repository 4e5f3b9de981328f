//! Node feature constraints: `--constraint=a100&ib`, `rack1|rack2`, `[rack1|rack2]`,
//! `graphics*4`, `[rack1*2&rack2*4]`, `[(knl&quad)*2&haswell*1]`.
//!
//! # Grammar
//! - A feature name: letters, digits and `_ . : = -`.
//! - `&` is AND (`,` is a synonym), `|` is OR, parentheses group (and may nest).
//! - **`&` and `|` have equal precedence and apply left to right**, as Slurm's scheduler
//!   evaluates them (its manual gives no precedence; slurmctld folds the list left to right):
//!   `a|b&c` means `(a|b)&c`. The canonical form ([`Display`](fmt::Display)) puts parentheses
//!   around every mixed group, so it reads the same under any convention.
//! - `TERM*N` (N ≥ 1), TERM a feature or a parenthesized group: at least N of the job's nodes
//!   must match TERM. Allowed once, as a term of the top-level AND (`graphics*4&intel`).
//! - One bracket group per constraint (as in Slurm), as a term of the top-level AND:
//!   - `[a|b|c]` — matching OR: every node of the job matches the same alternative;
//!   - `[a*2&b*4]` — multiple counts: 2 nodes matching `a` and 4 (other) nodes matching `b`;
//!     every term needs a count (Slurm's rule).
//!
//! # Semantics for the scheduler
//! - [`Constraint::matches`]: can this node be one of the job's nodes? Counted terms do not
//!   restrict single nodes (`graphics*4` lets the other nodes lack `graphics`), a matching OR
//!   is an OR and a multiple-counts group accepts a node matching any of its terms.
//! - [`Constraint::matching_or_alternatives`]: for `[a|b]`, the constraints one of which all
//!   nodes must satisfy together (`x&[a|b]` → `x&a`, `x&b`).
//! - [`Constraint::node_counts`]: the `(filter, N)` pairs: at least N nodes matching each
//!   filter, distinct nodes for distinct pairs.
//!
//! Refused although Slurm may accept it: mixing counts with a bracket group or with `|`,
//! several counted terms outside brackets (write `[a*2&b*4]`), counts inside a matching OR,
//! white space, and parentheses nested deeper than [`MAX_DEPTH`].

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::{SyntaxError, serde_via_string};

const WHAT: &str = "constraint";

/// Deepest parenthesis nesting accepted (bounds recursion).
pub const MAX_DEPTH: usize = 32;

/// A parsed `--constraint` expression (see the [module docs](self)).
///
/// [`Constraint::parse`] returns a normalized tree: `And`/`Or` have at least two children and
/// never a child of their own kind, and single-element parentheses are dropped. For such
/// trees `parse(c.to_string()) == c`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Constraint {
    /// A node feature.
    Feature(String),
    /// `a&b&…`: all must hold.
    And(Vec<Constraint>),
    /// `a|b|…`: any may hold.
    Or(Vec<Constraint>),
    /// `TERM*N`: at least `nodes` of the job's nodes match `expr`.
    Count {
        /// The counted term (a feature or a parenthesized expression).
        expr: Box<Constraint>,
        /// How many nodes.
        nodes: u32,
    },
    /// `[a|b|…]`: all of the job's nodes match one alternative.
    MatchingOr(Vec<Constraint>),
    /// `[a*2&b*4]`: `count` distinct nodes matching each term.
    MultipleCounts(Vec<(Constraint, u32)>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Name(String),
    And,
    Or,
    Star(u32),
    LParen,
    RParen,
    LBracket,
    RBracket,
}

fn describe(t: Option<&(Tok, usize)>) -> String {
    match t {
        None => "the end".to_string(),
        Some((tok, col)) => {
            let s = match tok {
                Tok::Name(n) => format!("{n:?}"),
                Tok::And => "'&'".into(),
                Tok::Or => "'|'".into(),
                Tok::Star(n) => format!("'*{n}'"),
                Tok::LParen => "'('".into(),
                Tok::RParen => "')'".into(),
                Tok::LBracket => "'['".into(),
                Tok::RBracket => "']'".into(),
            };
            format!("{s} at column {col}")
        }
    }
}

fn is_feature_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '=' | '-')
}

fn tokenize(s: &str) -> Result<Vec<(Tok, usize)>, SyntaxError> {
    let err = |msg: String| SyntaxError::new(WHAT, s, msg);
    let chars: Vec<char> = s.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let col = i + 1;
        let c = chars[i];
        let tok =
            match c {
                '&' | ',' => Tok::And,
                '|' => Tok::Or,
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                '[' => Tok::LBracket,
                ']' => Tok::RBracket,
                '*' => {
                    let start = i + 1;
                    let mut j = start;
                    while j < chars.len() && chars[j].is_ascii_digit() {
                        j += 1;
                    }
                    let digits: String = chars[start..j].iter().collect();
                    let n = super::parse_digits_u32(&digits).filter(|n| *n >= 1).ok_or_else(|| {
                    err(format!(
                        "'*' at column {col} must be followed by a node count >= 1, e.g. gpu*2"
                    ))
                })?;
                    toks.push((Tok::Star(n), col));
                    i = j;
                    continue;
                }
                c if is_feature_char(c) => {
                    let mut j = i;
                    while j < chars.len() && is_feature_char(chars[j]) {
                        j += 1;
                    }
                    toks.push((Tok::Name(chars[i..j].iter().collect()), col));
                    i = j;
                    continue;
                }
                c => {
                    return Err(err(format!(
                        "unexpected {c:?} at column {col}; feature names use letters, digits and \
                     _ . : = -, joined by & , | with ( ) [ ] and *N"
                    )));
                }
            };
        toks.push((tok, col));
        i += 1;
    }
    Ok(toks)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    And,
    Or,
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
    brackets_seen: bool,
}

/// An operand of a sequence, before folding.
struct Term {
    expr: Constraint,
    col: usize,
    counted: bool,
    bracket: bool,
}

impl Parser<'_> {
    fn err(&self, msg: String) -> SyntaxError {
        SyntaxError::new(WHAT, self.src, msg)
    }

    fn peek(&self) -> Option<&(Tok, usize)> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<(Tok, usize)> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    /// `NAME` or `( seq )`, without a count.
    fn atom(&mut self, depth: usize) -> Result<(Constraint, usize), SyntaxError> {
        match self.next() {
            Some((Tok::Name(n), col)) => Ok((Constraint::Feature(n), col)),
            Some((Tok::LParen, col)) => {
                if depth >= MAX_DEPTH {
                    return Err(self.err(format!(
                        "parentheses nested deeper than {MAX_DEPTH} at column {col}"
                    )));
                }
                let (inner, _) = self.seq(depth + 1, col)?;
                match self.next() {
                    Some((Tok::RParen, _)) => Ok((inner, col)),
                    _ => Err(self.err(format!("unbalanced '(' at column {col}"))),
                }
            }
            other => {
                self.pos -= 1;
                Err(self.err(format!(
                    "expected a feature name or '(' but found {}",
                    describe(other.as_ref())
                )))
            }
        }
    }

    /// An optional `*N` after an atom.
    fn count(&mut self) -> Option<u32> {
        if let Some((Tok::Star(n), _)) = self.peek() {
            let n = *n;
            self.pos += 1;
            Some(n)
        } else {
            None
        }
    }

    fn term(&mut self, depth: usize) -> Result<Term, SyntaxError> {
        if let Some((Tok::LBracket, col)) = self.peek() {
            let col = *col;
            self.pos += 1;
            if depth > 0 {
                return Err(self.err(format!(
                    "a [...] group cannot be inside parentheses (column {col})"
                )));
            }
            if self.brackets_seen {
                return Err(self.err(format!(
                    "second [...] group at column {col}; Slurm allows one per job"
                )));
            }
            self.brackets_seen = true;
            let expr = self.bracket(col)?;
            return Ok(Term {
                expr,
                col,
                counted: false,
                bracket: true,
            });
        }
        let (expr, col) = self.atom(depth)?;
        match self.count() {
            Some(nodes) => Ok(Term {
                expr: Constraint::Count {
                    expr: Box::new(expr),
                    nodes,
                },
                col,
                counted: true,
                bracket: false,
            }),
            None => Ok(Term {
                expr,
                col,
                counted: false,
                bracket: false,
            }),
        }
    }

    /// The inside of `[ ... ]` (the `[` is consumed); consumes the `]`.
    fn bracket(&mut self, open_col: usize) -> Result<Constraint, SyntaxError> {
        let mut items: Vec<(Constraint, Option<u32>, usize)> = Vec::new();
        let mut op: Option<Op> = None;
        loop {
            if let Some((Tok::LBracket, col)) = self.peek() {
                return Err(self.err(format!("nested '[' at column {col}")));
            }
            let (expr, col) = self.atom(1).map_err(|e| {
                if self.peek().is_none() {
                    self.err(format!("unbalanced '[' at column {open_col}"))
                } else {
                    e
                }
            })?;
            let count = self.count();
            items.push((expr, count, col));
            match self.next() {
                Some((Tok::RBracket, _)) => break,
                Some((t @ (Tok::And | Tok::Or), col)) => {
                    let this = if t == Tok::And { Op::And } else { Op::Or };
                    if op.is_some_and(|o| o != this) {
                        return Err(self.err(format!(
                            "'&' and '|' mixed inside [...] at column {col}; use [a|b] \
                             (matching OR) or [a*2&b*4] (node counts)"
                        )));
                    }
                    op = Some(this);
                }
                None => return Err(self.err(format!("unbalanced '[' at column {open_col}"))),
                other => {
                    return Err(self.err(format!(
                        "expected '&', '|' or ']' but found {}",
                        describe(other.as_ref())
                    )));
                }
            }
        }
        let all_counted = items.iter().all(|(_, c, _)| c.is_some());
        match op {
            Some(Op::And) => {
                if let Some((_, _, col)) = items.iter().find(|(_, c, _)| c.is_none()) {
                    return Err(self.err(format!(
                        "every term of [..&..] needs a node count (column {col}), e.g. \
                         [a*2&b*4]; for nodes with both features write a&b"
                    )));
                }
                Ok(Constraint::MultipleCounts(
                    items
                        .into_iter()
                        .map(|(e, c, _)| (e, c.unwrap_or(1)))
                        .collect(),
                ))
            }
            None if all_counted => Ok(Constraint::MultipleCounts(
                items
                    .into_iter()
                    .map(|(e, c, _)| (e, c.unwrap_or(1)))
                    .collect(),
            )),
            _ => {
                if let Some((_, _, col)) = items.iter().find(|(_, c, _)| c.is_some()) {
                    return Err(self.err(format!(
                        "node counts are not allowed in a matching OR [a|b] (column {col})"
                    )));
                }
                Ok(Constraint::MatchingOr(
                    items.into_iter().map(|(e, _, _)| e).collect(),
                ))
            }
        }
    }

    /// `term (op term)*`, folded left to right. Stops before `)` / `]` / end.
    fn seq(
        &mut self,
        depth: usize,
        open_col: usize,
    ) -> Result<(Constraint, Vec<Term>), SyntaxError> {
        let first = self.term(depth).map_err(|e| {
            if depth > 0 && self.peek().is_none() {
                self.err(format!("unbalanced '(' at column {open_col}"))
            } else {
                e
            }
        })?;
        let mut acc = first.expr.clone();
        let mut terms = vec![first];
        let mut ops = Vec::new();
        loop {
            let op = match self.peek() {
                Some((Tok::And, _)) => Op::And,
                Some((Tok::Or, _)) => Op::Or,
                Some((Tok::RParen, _)) if depth > 0 => break,
                None => break,
                Some((Tok::RParen, col)) => {
                    return Err(self.err(format!("unexpected ')' at column {col}")));
                }
                Some((Tok::RBracket, col)) => {
                    return Err(self.err(format!("unexpected ']' at column {col}")));
                }
                other => {
                    return Err(self.err(format!(
                        "expected '&', '|'{} but found {}",
                        if depth > 0 { " or ')'" } else { " or the end" },
                        describe(other)
                    )));
                }
            };
            let op_col = self.peek().map_or(0, |t| t.1);
            self.pos += 1;
            if self.peek().is_none() {
                return Err(self.err(format!(
                    "{} at column {op_col} has nothing after it",
                    if op == Op::And { "'&'" } else { "'|'" }
                )));
            }
            let t = self.term(depth)?;
            acc = fold(op, acc, t.expr.clone());
            terms.push(t);
            ops.push((op, op_col));
        }
        // Counts and brackets only as terms of a top-level AND.
        let special = terms.iter().filter(|t| t.counted || t.bracket).count();
        if let Some(t) = terms.iter().find(|t| t.counted || t.bracket) {
            let what = if t.bracket {
                "a [...] group"
            } else {
                "a node count (*N)"
            };
            if depth > 0 {
                return Err(self.err(format!(
                    "{what} cannot be inside parentheses (column {}); put it in [...]",
                    t.col
                )));
            }
            if let Some((_, col)) = ops.iter().find(|(o, _)| *o == Op::Or) {
                return Err(self.err(format!(
                    "{what} can only be joined with '&', not '|' (column {col})"
                )));
            }
            if special > 1 {
                return Err(self.err(format!(
                    "more than one node count or [...] group (column {}); write several \
                     counts as one group, e.g. [a*2&b*4]",
                    terms
                        .iter()
                        .filter(|t| t.counted || t.bracket)
                        .nth(1)
                        .map_or(0, |t| t.col)
                )));
            }
        }
        Ok((acc, terms))
    }
}

/// Left fold step, flattening associative chains.
fn fold(op: Op, acc: Constraint, next: Constraint) -> Constraint {
    let mut parts = match (op, acc) {
        (Op::And, Constraint::And(v)) | (Op::Or, Constraint::Or(v)) => v,
        (_, other) => vec![other],
    };
    match (op, next) {
        (Op::And, Constraint::And(v)) | (Op::Or, Constraint::Or(v)) => parts.extend(v),
        (_, other) => parts.push(other),
    }
    match op {
        Op::And => Constraint::And(parts),
        Op::Or => Constraint::Or(parts),
    }
}

impl Constraint {
    /// Parses a `--constraint` value (see the [module docs](self)).
    pub fn parse(s: &str) -> Result<Self, SyntaxError> {
        let toks = tokenize(s)?;
        if toks.is_empty() {
            return Err(SyntaxError::new(
                WHAT,
                s,
                "empty; expected node features joined by & or |, e.g. a100&ib",
            ));
        }
        let mut p = Parser {
            src: s,
            toks,
            pos: 0,
            brackets_seen: false,
        };
        let (expr, _) = p.seq(0, 0)?;
        match p.peek() {
            None => Ok(expr),
            Some((Tok::RParen, col)) => Err(p.err(format!("unexpected ')' at column {col}"))),
            Some((Tok::RBracket, col)) => Err(p.err(format!("unexpected ']' at column {col}"))),
            other => Err(p.err(format!("unexpected {}", describe(other)))),
        }
    }

    /// Whether a node with these features can be one of the job's nodes: counted terms do
    /// not restrict a single node, `[a|b]` acts as `a|b`, and `[a*2&b*4]` accepts a node
    /// matching `a` or `b`. The scheduler applies [`Constraint::node_counts`] and
    /// [`Constraint::matching_or_alternatives`] on top.
    pub fn matches(&self, has_feature: impl Fn(&str) -> bool) -> bool {
        self.eval(&has_feature)
    }

    fn eval(&self, has: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Constraint::Feature(f) => has(f),
            Constraint::And(v) => v.iter().all(|c| c.eval(has)),
            Constraint::Or(v) | Constraint::MatchingOr(v) => v.iter().any(|c| c.eval(has)),
            Constraint::Count { .. } => true,
            Constraint::MultipleCounts(v) => v.iter().any(|(c, _)| c.eval(has)),
        }
    }

    /// For a constraint with a matching OR `[a|b|…]` (alone or joined with `&`): one
    /// constraint per alternative, the bracket replaced by it (`x&[a|b]` → `[x&a, x&b]`).
    /// The job is placeable when all its nodes match one of them. `None` without a matching
    /// OR.
    pub fn matching_or_alternatives(&self) -> Option<Vec<Constraint>> {
        match self {
            Constraint::MatchingOr(alts) => Some(alts.clone()),
            Constraint::And(terms) => {
                let at = terms
                    .iter()
                    .position(|t| matches!(t, Constraint::MatchingOr(_)))?;
                let Constraint::MatchingOr(alts) = &terms[at] else {
                    return None;
                };
                Some(
                    alts.iter()
                        .map(|alt| {
                            let mut rest = terms.clone();
                            rest.remove(at);
                            fold(Op::And, Constraint::And(rest), alt.clone())
                        })
                        .collect(),
                )
            }
            _ => None,
        }
    }

    /// The node-count requirements: `(filter, n)` means at least `n` of the job's nodes match
    /// `filter`; different pairs need different nodes. From `TERM*N` at the top level or the
    /// terms of `[a*2&b*4]`. Empty when the constraint has no counts.
    pub fn node_counts(&self) -> Vec<(Constraint, u32)> {
        let one = |c: &Constraint| match c {
            Constraint::Count { expr, nodes } => vec![((**expr).clone(), *nodes)],
            Constraint::MultipleCounts(v) => v.clone(),
            _ => vec![],
        };
        match self {
            Constraint::And(terms) => terms.iter().flat_map(one).collect(),
            other => one(other),
        }
    }

    /// Every feature name mentioned, sorted.
    pub fn features(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.collect_features(&mut out);
        out
    }

    fn collect_features<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            Constraint::Feature(f) => {
                out.insert(f);
            }
            Constraint::And(v) | Constraint::Or(v) | Constraint::MatchingOr(v) => {
                v.iter().for_each(|c| c.collect_features(out))
            }
            Constraint::Count { expr, .. } => expr.collect_features(out),
            Constraint::MultipleCounts(v) => v.iter().for_each(|(c, _)| c.collect_features(out)),
        }
    }

    /// Writes `self` as an operand: parenthesized unless it is a feature or a bracket group.
    fn fmt_operand(&self, f: &mut fmt::Formatter<'_>, parent_is_and: Option<bool>) -> fmt::Result {
        let paren = match (self, parent_is_and) {
            (Constraint::And(_), Some(true)) | (Constraint::Or(_), Some(false)) => false,
            (Constraint::And(_) | Constraint::Or(_), _) => true,
            _ => false,
        };
        if paren {
            write!(f, "({self})")
        } else {
            write!(f, "{self}")
        }
    }
}

impl fmt::Display for Constraint {
    /// Canonical form: `&` for AND (never `,`), parentheses around every nested group.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |f: &mut fmt::Formatter<'_>, v: &[Constraint], sep: &str, and: Option<bool>| {
            for (i, c) in v.iter().enumerate() {
                if i > 0 {
                    f.write_str(sep)?;
                }
                c.fmt_operand(f, and)?;
            }
            Ok(())
        };
        match self {
            Constraint::Feature(n) => f.write_str(n),
            Constraint::And(v) => join(f, v, "&", Some(true)),
            Constraint::Or(v) => join(f, v, "|", Some(false)),
            Constraint::Count { expr, nodes } => {
                expr.fmt_operand(f, None)?;
                write!(f, "*{nodes}")
            }
            Constraint::MatchingOr(v) => {
                f.write_str("[")?;
                join(f, v, "|", None)?;
                f.write_str("]")
            }
            Constraint::MultipleCounts(v) => {
                f.write_str("[")?;
                for (i, (c, n)) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str("&")?;
                    }
                    c.fmt_operand(f, None)?;
                    write!(f, "*{n}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl FromStr for Constraint {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

serde_via_string!(Constraint, "a Slurm constraint such as \"a100&ib\"");

#[cfg(test)]
mod tests {
    use super::*;
    use Constraint::*;

    fn p(s: &str) -> Constraint {
        Constraint::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }
    fn feat(s: &str) -> Constraint {
        Feature(s.into())
    }
    fn msg(s: &str) -> String {
        Constraint::parse(s).unwrap_err().message
    }

    #[test]
    fn man_page_examples() {
        // sbatch(1) --constraint examples.
        assert_eq!(p("intel"), feat("intel"));
        assert_eq!(p("intel&gpu"), And(vec![feat("intel"), feat("gpu")]));
        assert_eq!(p("intel|amd"), Or(vec![feat("intel"), feat("amd")]));
        assert_eq!(
            p("[rack1|rack2|rack3|rack4]"),
            MatchingOr(vec![
                feat("rack1"),
                feat("rack2"),
                feat("rack3"),
                feat("rack4")
            ])
        );
        assert_eq!(
            p("[rack1*2&rack2*4]"),
            MultipleCounts(vec![(feat("rack1"), 2), (feat("rack2"), 4)])
        );
        assert_eq!(
            p("graphics*4"),
            Count {
                expr: Box::new(feat("graphics")),
                nodes: 4
            }
        );
        assert_eq!(
            p("[(rack1|rack2)*1&(rack3)*2]"),
            MultipleCounts(vec![
                (Or(vec![feat("rack1"), feat("rack2")]), 1),
                (feat("rack3"), 2)
            ])
        );
        assert_eq!(
            p("[(knl&snc4&flat)*4&haswell*1]"),
            MultipleCounts(vec![
                (And(vec![feat("knl"), feat("snc4"), feat("flat")]), 4),
                (feat("haswell"), 1)
            ])
        );
    }

    #[test]
    fn comma_is_and_and_names_allow_punctuation() {
        assert_eq!(p("a,b&c"), And(vec![feat("a"), feat("b"), feat("c")]));
        assert_eq!(p("a,b").to_string(), "a&b");
        assert_eq!(p("cpu.x86_64:v3=1-a"), feat("cpu.x86_64:v3=1-a"));
    }

    #[test]
    fn left_to_right_like_slurm() {
        // slurmctld folds & and | left to right: a|b&c is (a|b)&c.
        let c = p("a|b&c");
        assert_eq!(c, And(vec![Or(vec![feat("a"), feat("b")]), feat("c")]));
        assert_eq!(c.to_string(), "(a|b)&c");
        assert!(!c.matches(|f| f == "a"));
        assert!(c.matches(|f| f == "a" || f == "c"));
        let c = p("a&b|c");
        assert_eq!(c.to_string(), "(a&b)|c");
        assert!(c.matches(|f| f == "c"));
        assert_eq!(p("a|(b&c)").to_string(), "a|(b&c)");
        assert_eq!(p("((a))"), feat("a"));
        assert_eq!(p("a&(b&c)"), And(vec![feat("a"), feat("b"), feat("c")]));
    }

    #[test]
    fn single_node_matching() {
        let has = |set: &'static [&'static str]| move |f: &str| set.contains(&f);
        assert!(p("a100&ib").matches(has(&["a100", "ib"])));
        assert!(!p("a100&ib").matches(has(&["a100"])));
        assert!(p("[r1|r2]").matches(has(&["r2"])));
        assert!(!p("[r1|r2]").matches(has(&["r3"])));
        assert!(p("graphics*4&intel").matches(has(&["intel"])));
        assert!(!p("graphics*4&intel").matches(has(&["graphics"])));
        assert!(p("[a*2&b*4]").matches(has(&["b"])));
        assert!(!p("[a*2&b*4]").matches(has(&["c"])));
    }

    #[test]
    fn scheduler_views() {
        let c = p("gpu&[r1|(r2&big)]");
        assert_eq!(
            c.matching_or_alternatives().unwrap(),
            [
                And(vec![feat("gpu"), feat("r1")]),
                And(vec![feat("gpu"), feat("r2"), feat("big")])
            ]
        );
        assert_eq!(
            p("[a|b]").matching_or_alternatives().unwrap(),
            [feat("a"), feat("b")]
        );
        assert_eq!(p("a|b").matching_or_alternatives(), None);
        assert_eq!(
            p("[a*2&(b|c)*4]").node_counts(),
            [(feat("a"), 2), (Or(vec![feat("b"), feat("c")]), 4)]
        );
        assert_eq!(p("intel&graphics*4").node_counts(), [(feat("graphics"), 4)]);
        assert!(p("a&b").node_counts().is_empty());
        assert_eq!(
            p("x&[a*1&b*2]").features().into_iter().collect::<Vec<_>>(),
            ["a", "b", "x"]
        );
    }

    #[test]
    fn canonical_display() {
        for (input, canon) in [
            ("a&b|c", "(a&b)|c"),
            ("[a|b|(c&d)]", "[a|b|(c&d)]"),
            ("[(a)*2&(b|c)*3]", "[a*2&(b|c)*3]"),
            ("(a&b)*2&c", "(a&b)*2&c"),
            ("x,[a|b]", "x&[a|b]"),
        ] {
            assert_eq!(p(input).to_string(), canon, "{input}");
            assert_eq!(p(canon), p(input), "{canon}");
        }
    }

    #[test]
    fn errors_name_the_position() {
        assert_eq!(
            Constraint::parse("gpu&[a|b").unwrap_err().to_string(),
            "invalid constraint \"gpu&[a|b\": unbalanced '[' at column 5"
        );
        assert!(msg("(a&b").contains("unbalanced '(' at column 1"));
        assert!(msg("a&b)").contains("unexpected ')' at column 4"));
        assert!(msg("a]").contains("unexpected ']' at column 2"));
        assert!(msg("a&&b").contains("found '&' at column 3"));
        assert!(msg("a&").contains("'&' at column 2 has nothing after it"));
        assert!(msg("a b").contains("unexpected ' ' at column 2"));
        assert!(msg("a*0").contains("'*' at column 2"));
        assert!(msg("[a&b]").contains("needs a node count"));
        assert!(msg("[a*2|b]").contains("not allowed in a matching OR"));
        assert!(msg("[a|b&c]").contains("mixed inside [...]"));
        assert!(msg("[a|b]&[c|d]").contains("second [...] group"));
        assert!(msg("a|[b|c]").contains("not '|'"));
        assert!(msg("(a*2)").contains("cannot be inside parentheses"));
        assert!(msg("a*2&b*3").contains("[a*2&b*4]"));
        assert!(msg("[[a]]").contains("nested '['"));
        assert!(msg("").contains("empty"));
        assert!(msg(&"(".repeat(100)).contains("nested deeper"));
    }

    #[test]
    fn serde() {
        let c: Constraint = serde_json::from_str("\"a,b\"").unwrap();
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"a&b\"");
    }
}
