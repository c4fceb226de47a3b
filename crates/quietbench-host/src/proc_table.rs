//! The per-CPU column tables of /proc: /proc/interrupts and /proc/softirqs.
//!
//! Both files open with a header of CPU columns (`CPU0 CPU1 …`, online CPUs only) and then hold
//! one line per counter: a label, one count per column, and free text. This module reads that
//! shared shape (the header, the leading counts of a line) and owns the error types of the
//! parsers built on it; [`crate::interrupts`] and [`crate::procstat`] interpret the labels and
//! the text. It depends on nothing else in the crate, so neither of them depends on the other.

/// A /proc-style file that does not have the expected shape. Shared by the parsers of
/// [`crate::interrupts`], [`crate::procstat`] and [`crate::smaps`], which read the same kind of
/// line-oriented tables; re-exported as `interrupts::ParseError` and `procstat::ParseError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// One line is malformed.
    #[error("{file} line {line}: {reason}")]
    Line {
        /// The machine path of the file, e.g. `/proc/interrupts`.
        file: &'static str,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it, quoting the offending text.
        reason: String,
    },
    /// The file as a whole lacks something (empty, or a required line is missing).
    #[error("{file}: {reason}")]
    File {
        /// The machine path of the file.
        file: &'static str,
        /// What is missing.
        reason: String,
    },
}

/// Two samples of a per-CPU table cannot be compared. Re-exported as `interrupts::DeltaError`
/// and `procstat::DeltaError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// CPUs went on- or offline between the samples. A CPU's counters survive going offline, so
    /// a column that appears or disappears has no meaningful delta: take a fresh `before`.
    #[error(
        "the online CPUs changed between the two samples ({before:?} before, {after:?} after); take both samples again"
    )]
    CpusChanged {
        /// CPU columns of the first sample.
        before: Vec<u32>,
        /// CPU columns of the second sample.
        after: Vec<u32>,
    },
}

/// Parses the header of /proc/interrupts or /proc/softirqs (`CPU0 CPU1 …`) into CPU ids.
/// The reason string says what is wrong; callers add file and line.
pub(crate) fn parse_cpu_header(line: &str) -> Result<Vec<u32>, String> {
    let mut cpus: Vec<u32> = Vec::new();
    for token in line.split_whitespace() {
        let cpu = token
            .strip_prefix("CPU")
            .and_then(parse_digits::<u32>)
            .ok_or_else(|| {
                format!("expected a header of CPU columns like 'CPU0', found '{token}'")
            })?;
        // The kernel walks the online mask in ascending order; anything else means this is not
        // a header and the columns cannot be trusted.
        if cpus.last().is_some_and(|&last| cpu <= last) {
            return Err(format!("CPU columns are not ascending at '{token}'"));
        }
        cpus.push(cpu);
    }
    if cpus.is_empty() {
        return Err("the header names no CPU columns".to_string());
    }
    Ok(cpus)
}

/// Parses a number made of ASCII digits only. `str::parse` alone would also take `+5`, which
/// is never a count and would hide a misaligned column.
pub(crate) fn parse_digits<T: std::str::FromStr>(token: &str) -> Option<T> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

/// Splits up to `max` leading counts off `rest`. Returns the counts and the remaining text,
/// or a reason when a digit-only token overflows u64.
pub(crate) fn split_counts(rest: &str, max: usize) -> Result<(Vec<u64>, &str), String> {
    let mut counts = Vec::with_capacity(max);
    let mut remaining = rest;
    while counts.len() < max {
        let trimmed = remaining.trim_start();
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        let token = &trimmed[..end];
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        let count = token
            .parse::<u64>()
            .map_err(|_| format!("count '{token}' does not fit in 64 bits"))?;
        counts.push(count);
        remaining = &trimmed[end..];
    }
    Ok((counts, remaining.trim()))
}

/// The CPU columns of a per-CPU table (/proc/interrupts, /proc/softirqs) and its other
/// non-empty lines with their line numbers (from 1).
pub(crate) fn cpu_table<'a>(
    file: &'static str,
    text: &'a str,
) -> Result<(Vec<u32>, impl Iterator<Item = (usize, &'a str)>), ParseError> {
    let mut numbered = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((header_no, header)) = numbered.next() else {
        return Err(ParseError::File {
            file,
            reason: "the file is empty; expected a header like 'CPU0 CPU1'".to_string(),
        });
    };
    let cpus = parse_cpu_header(header).map_err(|reason| ParseError::Line {
        file,
        line: header_no,
        reason,
    })?;
    Ok((cpus, numbered))
}

#[cfg(test)]
mod tests;
