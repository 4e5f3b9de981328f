//! `--begin`: when a job becomes eligible to start, in the forms Slurm 22.05's `parse_time`
//! reads, resolved against the submitter's clock and time zone (as sbatch resolves it before
//! the job reaches the controller; the BatchJob holds the absolute time).
//!
//! | form | means |
//! |---|---|
//! | `HH:MM[:SS]`, optionally `AM`/`PM` | that time today, or tomorrow when it has passed |
//! | `now[+COUNT[UNIT]]` | now, plus COUNT seconds, `minute(s)`, `hour(s)`, `day(s)`, `week(s)` (or `second(s)`) |
//! | `YYYY-MM-DD[THH:MM[:SS]]` (or a space before the time) | that day, at midnight or the time |
//! | `MMDDYY`, `MM/DD/YY`, `MM.DD.YY` (year optional), then an optional ` HH:MM[:SS]` | that day |
//! | `midnight`, `noon`, `fika` (15:00), `teatime` (16:00) | the next such time |
//! | `today`, `tomorrow` | midnight of that day |
//!
//! Checked against `sbatch -vv --begin=…` of Slurm 22.05: units are whole words (`now+5min`,
//! `now+1h` and `now+10s` are refused, as there), a day past the month's end rolls over as
//! `mktime` does (`02/30/27` is March 2), an hour with `AM`/`PM` is 1–12, minutes have two
//! digits (`1:2` is refused), `TOMORROW` is refused while `NOW` and `Midnight` are not.
//! Refused here although Slurm reads them: `now-N` (Slurm reads it as `now+N`) and
//! `elevenses` (added after 22.05).

use jiff::civil::{Date, Time};
use jiff::{Span, Timestamp, Zoned};

use super::SyntaxError;

const WHAT: &str = "begin time";
const FORMS: &str = "expected HH:MM[:SS][AM|PM], now[+COUNT[seconds|minutes|hours|days|weeks]], YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], MMDD[YY], midnight, noon, fika, teatime, today or tomorrow";

/// The instant `s` names, with `now` the submitter's current time in their time zone.
pub fn parse(s: &str, now: &Zoned) -> Result<Timestamp, SyntaxError> {
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
    let mut date: Option<Date> = None;
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
        if let Some(d) = parse_date(w, today) {
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
            "today" => Some(today),
            "tomorrow" => Some(today.tomorrow().map_err(|e| err(&e.to_string()))?),
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
    let day = match (date, tod) {
        (Some(d), _) => d,
        // A time of day alone: today, or tomorrow once it has passed.
        (None, Some(tm)) if tm < now.time() => today.tomorrow().map_err(|e| err(&e.to_string()))?,
        (None, _) => today,
    };
    let at = day.to_datetime(tod.unwrap_or(Time::midnight()));
    at.to_zoned(now.time_zone().clone())
        .map(|z| z.timestamp())
        .map_err(|e| err(&e.to_string()))
}

/// `+COUNT[UNIT]` after `now` (empty: now).
fn now_plus(rest: &str, now: &Zoned) -> Option<Timestamp> {
    let base = now.timestamp();
    if rest.is_empty() {
        return Some(base);
    }
    let rest = rest.strip_prefix('+')?;
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
    let total = count.checked_mul(secs)?;
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

/// A date form; `None` when `w` is no date at all, `Some(Err)` when it is one but invalid.
fn parse_date(w: &str, today: Date) -> Option<Result<Date, SyntaxError>> {
    let bad = || SyntaxError::new(WHAT, w, format!("not a valid date; {FORMS}"));
    let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    // YYYY-MM-DD
    if w.len() == 10 && w.as_bytes()[4] == b'-' && w.as_bytes()[7] == b'-' {
        let (y, m, d) = (&w[..4], &w[5..7], &w[8..]);
        if !(all_digits(y) && all_digits(m) && all_digits(d)) {
            return Some(Err(bad()));
        }
        return Some(ymd(y.parse().ok(), m.parse().ok(), d.parse().ok()).ok_or_else(bad));
    }
    // MM/DD[/YY] and MM.DD[.YY]
    for sep in ['/', '.'] {
        if w.contains(sep) {
            let p: Vec<&str> = w.split(sep).collect();
            if !(2..=3).contains(&p.len()) || !p.iter().all(|x| all_digits(x) && x.len() <= 2) {
                return Some(Err(bad()));
            }
            let year = match p.get(2) {
                Some(y) => y.parse::<i16>().ok().map(|y| 2000 + y),
                None => Some(today.year()),
            };
            return Some(ymd(year, p[0].parse().ok(), p[1].parse().ok()).ok_or_else(bad));
        }
    }
    // MMDD[YY]
    if (w.len() == 4 || w.len() == 6) && all_digits(w) {
        let year = if w.len() == 6 {
            w[4..].parse::<i16>().ok().map(|y| 2000 + y)
        } else {
            Some(today.year())
        };
        return Some(ymd(year, w[..2].parse().ok(), w[2..4].parse().ok()).ok_or_else(bad));
    }
    None
}

/// A date from year, month 1–12 and day 1–31, a day past the month's end rolling into the
/// next month (as `mktime` does for Slurm).
fn ymd(y: Option<i16>, m: Option<i8>, d: Option<i8>) -> Option<Date> {
    let (y, m, d) = (y?, m?, d?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
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
        ] {
            assert_eq!(at(input), want, "{input}");
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
            "now-5",
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
