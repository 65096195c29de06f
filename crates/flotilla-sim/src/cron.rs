//! Cron schedules as CronJobs write them: five fields (minute, hour, day of month, month, day
//! of week) with `*`, `?`, lists, ranges, steps and month/day names, or the `@hourly`-style
//! macros; evaluated in a time zone (UTC unless the CronJob names one).

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A parsed schedule: the allowed values of each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    /// Both day fields restricted: a day matches if either does (cron's rule).
    either_day: bool,
}

const MONTHS: &[&str] = &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn value(text: &str, names: &[&str], offset: u32) -> Option<u32> {
    text.parse().ok().or_else(|| names.iter().position(|n| n.eq_ignore_ascii_case(text)).map(|i| i as u32 + offset))
}

/// Parse one field into a mask over `min..=max`; returns the mask and whether it was `*`.
fn field(text: &str, min: u32, max: u32, names: &[&str], name_offset: u32) -> Option<(Vec<bool>, bool)> {
    let mut mask = vec![false; max as usize + 1];
    let star = text == "*" || text == "?";
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" || range == "?" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, names, name_offset)?, value(b, names, name_offset)?)
        } else {
            let v = value(range, names, name_offset)?;
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min || hi > max || lo > hi {
            return None;
        }
        let mut v = lo;
        while v <= hi {
            mask[v as usize] = true;
            v += step;
        }
    }
    Some((mask, star))
}

impl Schedule {
    pub fn parse(text: &str) -> Option<Schedule> {
        let expanded = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let f: Vec<&str> = expanded.split_whitespace().collect();
        if f.len() != 5 {
            return None;
        }
        let (minutes, _) = field(f[0], 0, 59, &[], 0)?;
        let (hours, _) = field(f[1], 0, 23, &[], 0)?;
        let (days, any_day) = field(f[2], 1, 31, &[], 0)?;
        let (months, _) = field(f[3], 1, 12, MONTHS, 1)?;
        let (mut weekdays, any_weekday) = field(f[4], 0, 7, DAYS, 0)?;
        if weekdays[7] {
            weekdays[0] = true;
        }
        Some(Schedule { minutes, hours, days, months, weekdays, either_day: !any_day && !any_weekday })
    }

    fn matches(&self, t: Timestamp, tz: &TimeZone) -> bool {
        let z = t.to_zoned(tz.clone());
        let (day_ok, weekday_ok) = (self.days[z.day() as usize], self.weekdays[z.weekday().to_sunday_zero_offset() as usize]);
        let day = if self.either_day { day_ok || weekday_ok } else { day_ok && weekday_ok };
        self.minutes[z.minute() as usize] && self.hours[z.hour() as usize] && self.months[z.month() as usize] && day
    }

    /// The latest scheduled minute in `(after, now]`, if any (looking back at most a year).
    pub fn latest(&self, after: Timestamp, now: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = now.as_second() - now.as_second().rem_euclid(60);
        let mut t = Timestamp::from_second(start).ok()?;
        let limit = after.max(now.checked_sub(jiff::SignedDuration::from_hours(366 * 24)).unwrap_or(after));
        while t > limit {
            if self.matches(t, tz) {
                return Some(t);
            }
            t = t.checked_sub(1.minute()).ok()?;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn schedules() {
        let s = Schedule::parse("*/5 * * * *").unwrap();
        assert_eq!(s.latest(ts("2026-01-01T00:00:00Z"), ts("2026-01-01T00:12:30Z"), &TimeZone::UTC), Some(ts("2026-01-01T00:10:00Z")));
        assert_eq!(s.latest(ts("2026-01-01T00:10:00Z"), ts("2026-01-01T00:12:30Z"), &TimeZone::UTC), None);
        let h = Schedule::parse("@hourly").unwrap();
        assert_eq!(h.latest(ts("2026-01-01T00:00:00Z"), ts("2026-01-01T02:30:00Z"), &TimeZone::UTC), Some(ts("2026-01-01T02:00:00Z")));
        let mon = Schedule::parse("0 9 * jan-mar mon").unwrap();
        // 2026-01-05 is a Monday.
        assert_eq!(mon.latest(ts("2026-01-01T00:00:00Z"), ts("2026-01-06T00:00:00Z"), &TimeZone::UTC), Some(ts("2026-01-05T09:00:00Z")));
        assert!(Schedule::parse("61 * * * *").is_none());
        assert!(Schedule::parse("* * *").is_none());
    }
}
