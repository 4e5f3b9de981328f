//! Times as Slurm 22.05's `parse_time` reads them: `--begin` (when a job becomes eligible to
//! start; [`parse`]) and sacct's `--starttime`/`--endtime` ([`parse_past`]), resolved against
//! the user's clock and time zone (as sbatch resolves `--begin` before the job reaches the
//! controller; the BatchJob holds the absolute time).
//!
//! | form | means |
//! |---|---|
//! | `HH:MM[:SS]`, optionally `AM`/`PM` | that time today, or tomorrow when its minute has passed (looking back: today) |
//! | `now[{+\|-}COUNT[UNIT]]` | now, plus or minus COUNT seconds, `minute(s)`, `hour(s)`, `day(s)`, `week(s)` (or `second(s)`) |
//! | `YYYY-MM-DD[THH:MM[:SS]]` (or a space before the time) | that day, at midnight or the time |
//! | `MMDDYY`, `MM/DD/YY`, `MM.DD.YY` (year optional), then an optional ` HH:MM[:SS]` | that day; without a year, the next such day after now (looking back: this year's, or last year's for a later month) |
//! | `midnight`, `noon`, `fika` (15:00), `teatime` (16:00) | the next such time |
//! | `today`, `tomorrow` | midnight of that day |
//!
//! Checked against `sbatch -vv --begin=…` of Slurm 22.05: units are whole words (`now+5min`,
//! `now+1h` and `now+10s` are refused, as there), a day past the month's end rolls over as
//! `mktime` does (`02/30/27` is March 2), an hour with `AM`/`PM` is 1–12, minutes have two
//! digits (`1:2` is refused), `TOMORROW` is refused while `NOW` and `Midnight` are not.
//! `now-5minutes` is five minutes ago, and `12/01` on December 1st is next year's (checked
//! again on 2026-12-01). Refused here although Slurm reads them: `elevenses` (added after
//! 22.05).

use jiff::civil::{Date, Time};
use jiff::{Span, Timestamp, Zoned};

use super::SyntaxError;

const WHAT: &str = "begin time";
const FORMS: &str = "expected HH:MM[:SS][AM|PM], now[{+|-}COUNT[seconds|minutes|hours|days|weeks]], YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], MMDD[YY], midnight, noon, fika, teatime, today or tomorrow";

/// The instant `s` names, with `now` the submitter's current time in their time zone; a day
/// or year left out is the next one (`--begin`).
pub fn parse(s: &str, now: &Zoned) -> Result<Timestamp, SyntaxError> {
    parse_toward(s, now, false)
}

/// [`parse`] looking back, as sacct reads `--starttime`/`--endtime` (Slurm's `past` flag): a
/// time of day alone is today's, a date without a year this year's (last year's when its month
/// is later than now's).
pub fn parse_past(s: &str, now: &Zoned) -> Result<Timestamp, SyntaxError> {
    parse_toward(s, now, true).map_err(|e| SyntaxError { what: "time", ..e })
}

fn parse_toward(s: &str, now: &Zoned, past: bool) -> Result<Timestamp, SyntaxError> {
    let err = |m: &str| SyntaxError::new(WHAT, s, m.to_string());
    let t = s.trim();
    if t.is_empty() {
        return Err(err(FORMS));
    }
    if t.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("now")) {
        return now_plus(&t[3..], now).ok_or_else(|| err(FORMS));
    }
    let today = now.date();
    // One date and one time of day, in either order, split at 'T' (ISO) or spaces.
    let mut date: Option<DateSpec> = None;
    let mut tod: Option<Time> = None;
    let mut words: Vec<&str> = Vec::new();
    for w in t.split_whitespace() {
        match iso_split(w) {
            Some((d, tm)) => {
                words.push(d);
                words.push(tm);
            }
            None => words.push(w),
        }
    }
    for w in words {
        if let Some(d) = parse_date(w) {
            if date.replace(d?).is_some() {
                return Err(err("two dates given"));
            }
            continue;
        }
        let named = match w.to_ascii_lowercase().as_str() {
            "midnight" => Some(Time::midnight()),
            "noon" => Some(Time::constant(12, 0, 0, 0)),
            "fika" => Some(Time::constant(15, 0, 0, 0)),
            "teatime" => Some(Time::constant(16, 0, 0, 0)),
            _ => None,
        };
        let day_word = match w {
            "today" => Some(DateSpec::of(today)),
            "tomorrow" => Some(DateSpec::of(
                today.tomorrow().map_err(|e| err(&e.to_string()))?,
            )),
            _ => None,
        };
        if let Some(d) = day_word {
            if date.replace(d).is_some() {
                return Err(err("two dates given"));
            }
        } else if let Some(tm) = named.or_else(|| parse_clock(w)) {
            if tod.replace(tm).is_some() {
                return Err(err("two times of day given"));
            }
        } else {
            return Err(err(FORMS));
        }
    }
    let time = tod.unwrap_or(Time::midnight());
    // Slurm compares hours and minutes only: at 22:50:24, `22:50` is tomorrow's.
    let later = |m: i8, d: i8| {
        (m, d, time.hour(), time.minute()) > (now.month(), now.day(), now.hour(), now.minute())
    };
    let day = match (date, tod) {
        (
            Some(DateSpec {
                year: Some(y),
                month,
                day,
            }),
            _,
        ) => ymd(y, month, day),
        (
            Some(DateSpec {
                year: None,
                month,
                day,
            }),
            _,
        ) => {
            let y = today.year();
            let y = match past {
                true if month > now.month() => y - 1,
                true => y,
                false if later(month, day) => y,
                false => y + 1,
            };
            ymd(y, month, day)
        }
        // A time of day alone: today, or tomorrow once its minute has passed.
        (None, Some(_)) if !past && !later(now.month(), now.day()) => {
            Some(today.tomorrow().map_err(|e| err(&e.to_string()))?)
        }
        (None, _) => Some(today),
    }
    .ok_or_else(|| err(&format!("not a valid date; {FORMS}")))?;
    let at = day.to_datetime(time);
    at.to_zoned(now.time_zone().clone())
        .map(|z| z.timestamp())
        .map_err(|e| err(&e.to_string()))
}

/// `{+|-}COUNT[UNIT]` after `now` (empty: now; blanks around the sign allowed, as Slurm's).
fn now_plus(rest: &str, now: &Zoned) -> Option<Timestamp> {
    let base = now.timestamp();
    let rest = rest.trim_start();
    if rest.is_empty() {
        return Some(base);
    }
    let (sign, rest) = match rest.as_bytes()[0] {
        b'+' => (1, rest[1..].trim_start()),
        b'-' => (-1, rest[1..].trim_start()),
        _ => return None,
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let count: i64 = rest[..digits].parse().ok()?;
    let unit = rest[digits..].to_ascii_lowercase();
    let secs = match unit.as_str() {
        "" | "second" | "seconds" => 1,
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3600,
        "day" | "days" => 86_400,
        "week" | "weeks" => 7 * 86_400,
        _ => return None,
    };
    let total = count.checked_mul(secs)?.checked_mul(sign)?;
    base.checked_add(Span::new().try_seconds(total).ok()?).ok()
}

/// `2027-01-02T10:20` → (`2027-01-02`, `10:20`).
fn iso_split(w: &str) -> Option<(&str, &str)> {
    let (d, t) = w.split_once('T')?;
    (d.len() == 10 && d.as_bytes()[4] == b'-').then_some((d, t))
}

/// `HH:MM[:SS]` with an optional `AM`/`PM`.
fn parse_clock(w: &str) -> Option<Time> {
    let lower = w.to_ascii_lowercase();
    let (body, ampm) = match lower.strip_suffix("am") {
        Some(b) => (b, Some(false)),
        None => match lower.strip_suffix("pm") {
            Some(b) => (b, Some(true)),
            None => (lower.as_str(), None),
        },
    };
    let parts: Vec<&str> = body.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let num = |p: &str, max_len: usize| -> Option<i8> {
        (!p.is_empty() && p.len() <= max_len && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse().ok())
            .flatten()
    };
    let mut h = num(parts[0], 2)?;
    if parts[1].len() != 2 {
        return None;
    }
    let m = num(parts[1], 2)?;
    let s = match parts.get(2) {
        Some(p) if p.len() == 2 => num(p, 2)?,
        Some(_) => return None,
        None => 0,
    };
    match ampm {
        Some(pm) => {
            if !(1..=12).contains(&h) {
                return None;
            }
            h = (h % 12) + if pm { 12 } else { 0 };
        }
        None if h > 23 => return None,
        None => {}
    }
    if m > 59 || s > 59 {
        return None;
    }
    Time::new(h, m, s, 0).ok()
}

/// A day as written: the year may be left out.
#[derive(Clone, Copy)]
struct DateSpec {
    year: Option<i16>,
    month: i8,
    day: i8,
}

impl DateSpec {
    fn of(d: Date) -> DateSpec {
        DateSpec {
            year: Some(d.year()),
            month: d.month(),
            day: d.day(),
        }
    }
}

/// A date form; `None` when `w` is no date at all, `Some(Err)` when it is one but invalid.
fn parse_date(w: &str) -> Option<Result<DateSpec, SyntaxError>> {
    let bad = || SyntaxError::new(WHAT, w, format!("not a valid date; {FORMS}"));
    let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let spec = |y: Option<Option<i16>>, m: &str, d: &str| {
        let (month, day) = (m.parse::<i8>().ok(), d.parse::<i8>().ok());
        match (y, month, day) {
            (Some(year), Some(month), Some(day))
                if (1..=12).contains(&month) && (1..=31).contains(&day) =>
            {
                Ok(DateSpec { year, month, day })
            }
            _ => Err(bad()),
        }
    };
    // YYYY-MM-DD
    if w.len() == 10 && w.as_bytes()[4] == b'-' && w.as_bytes()[7] == b'-' {
        let (y, m, d) = (&w[..4], &w[5..7], &w[8..]);
        if !(all_digits(y) && all_digits(m) && all_digits(d)) {
            return Some(Err(bad()));
        }
        return Some(spec(y.parse().ok().map(Some), m, d));
    }
    // MM/DD[/YY] and MM.DD[.YY]
    for sep in ['/', '.'] {
        if w.contains(sep) {
            let p: Vec<&str> = w.split(sep).collect();
            if !(2..=3).contains(&p.len()) || !p.iter().all(|x| all_digits(x) && x.len() <= 2) {
                return Some(Err(bad()));
            }
            let year = match p.get(2) {
                Some(y) => y.parse::<i16>().ok().map(|y| Some(2000 + y)),
                None => Some(None),
            };
            return Some(spec(year, p[0], p[1]));
        }
    }
    // MMDD[YY]
    if (w.len() == 4 || w.len() == 6) && all_digits(w) {
        let year = if w.len() == 6 {
            w[4..].parse::<i16>().ok().map(|y| Some(2000 + y))
        } else {
            Some(None)
        };
        return Some(spec(year, &w[..2], &w[2..4]));
    }
    None
}

/// A date from year, month 1–12 and day 1–31, a day past the month's end rolling into the
/// next month (as `mktime` does for Slurm).
fn ymd(y: i16, m: i8, d: i8) -> Option<Date> {
    let first = Date::new(y, m, 1).ok()?;
    first.checked_add(Span::new().days(i64::from(d) - 1)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-24 21:57:52 in UTC, the moment the Slurm 22.05 answers below were taken.
    fn now() -> Zoned {
        "2026-11-24T21:57:52+00:00[+00:00]".parse().unwrap()
    }

    fn at(s: &str) -> String {
        parse(s, &now())
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string()
    }

    /// What `sbatch -vv --begin=X` printed as `begin :` (Slurm 22.05.8, TZ=UTC), each
    /// shifted to the same `now`.
    #[test]
    fn slurms_forms_give_slurms_times() {
        for (input, want) in [
            ("now", "2026-11-24T21:57:52"),
            ("now+0", "2026-11-24T21:57:52"),
            ("now+60", "2026-11-24T21:58:52"),
            ("now+10seconds", "2026-11-24T21:58:02"),
            ("now+1second", "2026-11-24T21:57:53"),
            ("now+1minute", "2026-11-24T21:58:52"),
            ("now+5minutes", "2026-11-24T22:02:52"),
            ("now+1hour", "2026-11-24T22:57:52"),
            ("NOW+1HOUR", "2026-11-24T22:57:52"),
            ("now+2hours", "2026-11-24T23:57:52"),
            ("now+1day", "2026-11-25T21:57:52"),
            ("now+1days", "2026-11-25T21:57:52"),
            ("now+1week", "2026-12-01T21:57:52"),
            ("now+3weeks", "2026-12-15T21:57:52"),
            ("16:00", "2026-11-25T16:00:00"),
            ("10:30:15", "2026-11-25T10:30:15"),
            ("23:59:59", "2026-11-24T23:59:59"),
            ("0:00", "2026-11-25T00:00:00"),
            ("4:00PM", "2026-11-25T16:00:00"),
            ("4:00pm", "2026-11-25T16:00:00"),
            ("12:00AM", "2026-11-25T00:00:00"),
            ("12:30AM", "2026-11-25T00:30:00"),
            ("2027-01-02", "2027-01-02T00:00:00"),
            ("2027-01-02T10:20", "2027-01-02T10:20:00"),
            ("2027-01-02T10:20:30", "2027-01-02T10:20:30"),
            ("2027-01-02 10:20", "2027-01-02T10:20:00"),
            ("010227", "2027-01-02T00:00:00"),
            ("01/02/27", "2027-01-02T00:00:00"),
            ("02/30/27", "2027-03-02T00:00:00"),
            ("midnight", "2026-11-25T00:00:00"),
            ("Midnight", "2026-11-25T00:00:00"),
            ("noon", "2026-11-25T12:00:00"),
            ("fika", "2026-11-25T15:00:00"),
            ("teatime", "2026-11-25T16:00:00"),
            ("today", "2026-11-24T00:00:00"),
            ("tomorrow", "2026-11-25T00:00:00"),
            // Checked on 2026-12-01 at 22:48–22:50 (sbatch -vv), shifted the same way.
            ("now-5", "2026-11-24T21:57:47"),
            ("now - 5", "2026-11-24T21:57:47"),
            ("now-5minutes", "2026-11-24T21:52:52"),
            ("now-1day", "2026-11-23T21:57:52"),
            ("11/24", "2027-11-24T00:00:00"),
            ("1124", "2027-11-24T00:00:00"),
            ("11/24 23:59", "2026-11-24T23:59:00"),
            ("11/25 10:00", "2026-11-25T10:00:00"),
            ("12/25", "2026-12-25T00:00:00"),
            ("01/05", "2027-01-05T00:00:00"),
            ("01.05", "2027-01-05T00:00:00"),
            ("21:57", "2026-11-25T21:57:00"),
            ("21:57:59", "2026-11-25T21:57:59"),
            ("21:58", "2026-11-24T21:58:00"),
        ] {
            assert_eq!(at(input), want, "{input}");
        }
    }

    /// Looking back (sacct's `-S`/`-E`, Slurm's `parse_time(s, 1)`): a time of day is today's,
    /// a date without a year this year's, or last year's for a month after now's.
    #[test]
    fn looking_back() {
        for (input, want) in [
            ("now-1hour", "2026-11-24T20:57:52"),
            ("21:00", "2026-11-24T21:00:00"),
            ("23:00", "2026-11-24T23:00:00"),
            ("11/30", "2026-11-30T00:00:00"),
            ("12/01", "2025-12-01T00:00:00"),
            ("01/05", "2026-01-05T00:00:00"),
            ("2026-11-01", "2026-11-01T00:00:00"),
            ("midnight", "2026-11-24T00:00:00"),
        ] {
            let got = parse_past(input, &now())
                .unwrap_or_else(|e| panic!("{input}: {e}"))
                .strftime("%Y-%m-%dT%H:%M:%S")
                .to_string();
            assert_eq!(got, want, "{input}");
        }
    }

    /// What Slurm 22.05 refuses (`Invalid --begin specification`), refused here too.
    #[test]
    fn slurms_refusals_are_refused() {
        for input in [
            "",
            "now+2min",
            "now+10s",
            "now+1h",
            "now+1hr",
            "now+5mins",
            "now+xyz",
            "now+1week2",
            "now+5minutes1",
            "4pm",
            "16:00AM",
            "25:00",
            "1:2",
            "2027-1-2",
            "2027-01-02T10",
            "2027-01-02T25:00",
            "2027-13-01",
            "bogus",
            "TOMORROW",
            "elevenses",
            "now*5",
            "nöw",
            "ñow+1",
        ] {
            let e = parse(input, &now()).expect_err(input);
            assert_eq!(e.what, WHAT, "{input}");
        }
    }

    #[test]
    fn the_submitters_time_zone_is_used() {
        let ny: Zoned = "2026-11-24T16:57:52-05:00[-05:00]".parse().unwrap();
        let t = parse("18:00", &ny).unwrap();
        assert_eq!(t.to_string(), "2026-11-24T23:00:00Z");
    }
}
