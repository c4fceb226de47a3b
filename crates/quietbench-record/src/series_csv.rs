//! Series a user brings as CSV (`quietbench changes --csv FILE`): one column per series, and an
//! optional column whose values label the points (a time, a run, a commit), as histories
//! exported from other tools come. Pure: text in, typed series out, or an error that names the
//! line, the column and how to fix it.
//!
//! The format is the RFC 4180 subset spreadsheets and exporters write: the first record is the
//! header (column names), fields are separated by commas, a field may be quoted (`"a,b"`, with
//! `""` for a quote inside, and line breaks inside quotes kept), records end with LF or CRLF, the
//! last one's line break is optional, and blank lines at the end are ignored. Unquoted fields are
//! trimmed of spaces and tabs, and a UTF-8 byte-order mark at the start is skipped (Excel writes
//! one). Refused, each with its line: a row with another number of fields than the header, a
//! value that is not a finite number in a series column, an empty value (there is no honest
//! level to put in its place: drop the row or fill it before), a blank line inside the data, an
//! empty or duplicated column name, a file with no header or no rows, and input past the bounds
//! below.

use std::fmt;

/// The most bytes of input: 64 MiB, far above any history (a million rows of ten series).
pub const MAX_BYTES: usize = 64 << 20;
/// The most rows after the header.
pub const MAX_ROWS: usize = 1_000_000;
/// The most columns.
pub const MAX_COLUMNS: usize = 4096;
/// The names (any case) that make a first column the index when none is named.
pub const INDEX_NAMES: &[&str] = &["time", "run", "date", "timestamp", "commit", "revision"];

/// Which column labels the points.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IndexColumn {
    /// The first column, when its name is one of [`INDEX_NAMES`] (any case); else none.
    #[default]
    Auto,
    /// The column of this name (exactly as the header writes it).
    Named(String),
    /// None: every column is a series.
    None,
}

/// The labelling column: its name and one label per row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// The column's name.
    pub name: String,
    /// One label per row, as written (any text, possibly empty).
    pub labels: Vec<String>,
}

/// One series: a column's name and its values, in row order.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedSeries {
    /// The column's name.
    pub name: String,
    /// One finite value per row.
    pub values: Vec<f64>,
}

/// A parsed file: every series has one value per row.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesTable {
    /// The labelling column, if any.
    pub index: Option<Index>,
    /// The series, in column order.
    pub series: Vec<NamedSeries>,
    /// Rows after the header.
    pub rows: usize,
}

impl SeriesTable {
    /// The label of row `row`, if there is an index column.
    pub fn label(&self, row: usize) -> Option<&str> {
        self.index
            .as_ref()
            .and_then(|i| i.labels.get(row))
            .map(String::as_str)
    }
}

/// A column, for an error message: its 1-based number and its header name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// 1-based.
    pub number: usize,
    /// As the header names it.
    pub name: String,
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {} ({:?})", self.number, self.name)
    }
}

/// Why a CSV cannot be read as series. Lines are 1-based, as an editor numbers them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CsvError {
    /// More than [`MAX_BYTES`].
    #[error(
        "the input is larger than {limit} bytes (64 MiB), the most `changes` reads: keep the newest rows"
    )]
    TooLarge {
        /// The bound.
        limit: usize,
    },
    /// More than [`MAX_ROWS`] rows.
    #[error("line {line}: more than {limit} rows, the most `changes` reads: keep the newest rows")]
    TooManyRows {
        /// The first line past the bound.
        line: usize,
        /// The bound.
        limit: usize,
    },
    /// More than [`MAX_COLUMNS`] columns.
    #[error("line {line}: the header has {found} columns, more than the {limit} `changes` reads")]
    TooManyColumns {
        /// The header's line.
        line: usize,
        /// Columns found.
        found: usize,
        /// The bound.
        limit: usize,
    },
    /// Nothing but blank lines.
    #[error(
        "the input is empty: give a header line of column names, then one row per point \
         (e.g. \"time,latency_ms\" then \"2024-05-01,12.5\")"
    )]
    Empty,
    /// A header and no rows.
    #[error("line {line}: a header and no rows: give at least one row of values after it")]
    NoRows {
        /// The header's line.
        line: usize,
    },
    /// A row with another number of fields than the header.
    #[error(
        "line {line}: {found} field{} where the header has {expected}: every row needs one \
         value per column (a value with a comma must be quoted: \"1,5\")",
        if *found == 1 { "" } else { "s" }
    )]
    Ragged {
        /// The row's line.
        line: usize,
        /// Fields in the row.
        found: usize,
        /// Fields in the header.
        expected: usize,
    },
    /// A blank line between rows.
    #[error(
        "line {line} is blank, inside the data: remove it (only blank lines at the end are ignored)"
    )]
    BlankLine {
        /// The blank line.
        line: usize,
    },
    /// A series value that does not parse as a number.
    #[error(
        "line {line}, {column}: {text:?} is not a number (write values such as 12.5 or 1.2e3, \
         a point as the decimal mark, no units; name the labels' column with --index)"
    )]
    NotANumber {
        /// The row's line.
        line: usize,
        /// The column.
        column: Column,
        /// The field as written (at most 40 characters of it).
        text: String,
    },
    /// NaN or an infinity.
    #[error(
        "line {line}, {column}: {text:?} is not a finite number: a series' values must be finite"
    )]
    NotFinite {
        /// The row's line.
        line: usize,
        /// The column.
        column: Column,
        /// The field as written.
        text: String,
    },
    /// An empty value in a series column.
    #[error(
        "line {line}, {column}: the value is missing: every row needs a value in every series \
         (drop the row, or split the series into files of their own)"
    )]
    Missing {
        /// The row's line.
        line: usize,
        /// The column.
        column: Column,
    },
    /// An empty column name.
    #[error("line {line}: column {number} has no name: name every column in the header")]
    EmptyName {
        /// The header's line.
        line: usize,
        /// 1-based.
        number: usize,
    },
    /// Two columns of one name.
    #[error(
        "line {line}: columns {first} and {second} are both named {name:?}: give each column its own name"
    )]
    DuplicateName {
        /// The header's line.
        line: usize,
        /// The name.
        name: String,
        /// 1-based.
        first: usize,
        /// 1-based.
        second: usize,
    },
    /// `--index NAME` names no column.
    #[error("line {line}: no column is named {name:?} (--index); the header has {columns}")]
    UnknownIndex {
        /// The header's line.
        line: usize,
        /// The name asked for.
        name: String,
        /// The header's names, quoted and joined.
        columns: String,
    },
    /// Only the index column.
    #[error("line {line}: the only column, {name:?}, is the index: add a column of values")]
    NoSeries {
        /// The header's line.
        line: usize,
        /// The index column's name.
        name: String,
    },
    /// A quoted field that never closes.
    #[error("line {line}: a quoted field opens here and never closes: end it with a quote (\")")]
    UnclosedQuote {
        /// Where the field opens.
        line: usize,
    },
    /// A quote where RFC 4180 allows none.
    #[error(
        "line {line}: a quote inside a field: quote the whole field and double the quotes \
         inside it (\"say \"\"hi\"\"\")"
    )]
    StrayQuote {
        /// The line.
        line: usize,
    },
}

impl CsvError {
    /// The 1-based line the error is on, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            CsvError::TooLarge { .. } | CsvError::Empty => None,
            CsvError::TooManyRows { line, .. }
            | CsvError::TooManyColumns { line, .. }
            | CsvError::NoRows { line }
            | CsvError::Ragged { line, .. }
            | CsvError::BlankLine { line }
            | CsvError::NotANumber { line, .. }
            | CsvError::NotFinite { line, .. }
            | CsvError::Missing { line, .. }
            | CsvError::EmptyName { line, .. }
            | CsvError::DuplicateName { line, .. }
            | CsvError::UnknownIndex { line, .. }
            | CsvError::NoSeries { line, .. }
            | CsvError::UnclosedQuote { line }
            | CsvError::StrayQuote { line } => Some(*line),
        }
    }
}

/// One record: its first line, and its fields (unquoted ones trimmed).
struct Record {
    line: usize,
    fields: Vec<String>,
    /// A line with nothing on it but spaces and tabs.
    blank: bool,
}

/// Reads records one at a time, counting lines.
struct Records<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Records<'a> {
    fn new(text: &'a str) -> Self {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        Records {
            text,
            pos: 0,
            line: 1,
        }
    }

    /// The next record, or None at the end of the input.
    fn next_record(&mut self) -> Result<Option<Record>, CsvError> {
        if self.pos >= self.text.len() {
            return Ok(None);
        }
        let start_line = self.line;
        let bytes = self.text.as_bytes();
        let mut fields = Vec::new();
        let mut any_quoted = false;
        loop {
            // One field, from self.pos.
            let mut i = self.pos;
            while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
                i += 1;
            }
            if i < bytes.len() && bytes[i] == b'"' {
                any_quoted = true;
                let open_line = self.line;
                let mut value = String::new();
                let mut from = i + 1;
                let mut j = from;
                loop {
                    let Some(k) = bytes[j..].iter().position(|&b| b == b'"' || b == b'\n') else {
                        return Err(CsvError::UnclosedQuote { line: open_line });
                    };
                    let k = j + k;
                    if bytes[k] == b'\n' {
                        self.line += 1;
                        j = k + 1;
                        continue;
                    }
                    value.push_str(&self.text[from..k]);
                    if bytes.get(k + 1) == Some(&b'"') {
                        value.push('"');
                        from = k + 2;
                        j = from;
                        continue;
                    }
                    i = k + 1;
                    break;
                }
                while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
                    i += 1;
                }
                fields.push(value);
                match bytes.get(i) {
                    None => {
                        self.pos = i;
                        break;
                    }
                    Some(b',') => self.pos = i + 1,
                    Some(b'\n') => {
                        self.pos = i + 1;
                        self.line += 1;
                        break;
                    }
                    Some(b'\r') if bytes.get(i + 1) == Some(&b'\n') => {
                        self.pos = i + 2;
                        self.line += 1;
                        break;
                    }
                    Some(_) => return Err(CsvError::StrayQuote { line: self.line }),
                }
            } else {
                let end = bytes[self.pos..]
                    .iter()
                    .position(|&b| b == b',' || b == b'\n')
                    .map_or(bytes.len(), |k| self.pos + k);
                let raw = &self.text[self.pos..end];
                let raw = raw.strip_suffix('\r').unwrap_or(raw);
                if raw.contains('"') {
                    return Err(CsvError::StrayQuote { line: self.line });
                }
                fields.push(raw.trim_matches([' ', '\t']).to_string());
                match bytes.get(end) {
                    Some(b',') => self.pos = end + 1,
                    Some(_) => {
                        self.pos = end + 1;
                        self.line += 1;
                        break;
                    }
                    None => {
                        self.pos = end;
                        break;
                    }
                }
            }
        }
        let blank = !any_quoted && fields.len() == 1 && fields[0].is_empty();
        Ok(Some(Record {
            line: start_line,
            fields,
            blank,
        }))
    }
}

/// Parses `text` into series, the labelling column chosen by `index`.
pub fn parse_series_csv(text: &str, index: &IndexColumn) -> Result<SeriesTable, CsvError> {
    if text.len() > MAX_BYTES {
        return Err(CsvError::TooLarge { limit: MAX_BYTES });
    }
    let mut records = Records::new(text);
    // The header: the first record that is not blank.
    let header = loop {
        match records.next_record()? {
            None => return Err(CsvError::Empty),
            Some(r) if r.blank => continue,
            Some(r) => break r,
        }
    };
    let hline = header.line;
    let names = header.fields;
    if names.len() > MAX_COLUMNS {
        return Err(CsvError::TooManyColumns {
            line: hline,
            found: names.len(),
            limit: MAX_COLUMNS,
        });
    }
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(CsvError::EmptyName {
                line: hline,
                number: i + 1,
            });
        }
        if let Some(first) = names[..i].iter().position(|n| n == name) {
            return Err(CsvError::DuplicateName {
                line: hline,
                name: name.clone(),
                first: first + 1,
                second: i + 1,
            });
        }
    }
    let index_at = match index {
        IndexColumn::None => None,
        IndexColumn::Auto => INDEX_NAMES
            .iter()
            .any(|n| names[0].eq_ignore_ascii_case(n))
            .then_some(0),
        IndexColumn::Named(name) => {
            Some(names.iter().position(|n| n == name).ok_or_else(|| {
                CsvError::UnknownIndex {
                    line: hline,
                    name: name.clone(),
                    columns: names
                        .iter()
                        .map(|n| format!("{n:?}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            })?)
        }
    };
    if index_at.is_some() && names.len() == 1 {
        return Err(CsvError::NoSeries {
            line: hline,
            name: names[0].clone(),
        });
    }
    let mut labels: Vec<String> = Vec::new();
    let mut columns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut rows = 0usize;
    // A blank line is an error only when a row follows it.
    let mut blank_at: Option<usize> = None;
    while let Some(record) = records.next_record()? {
        if record.blank {
            blank_at.get_or_insert(record.line);
            continue;
        }
        if let Some(line) = blank_at {
            // With one column a blank line inside the data is an empty value.
            return Err(if names.len() == 1 {
                CsvError::Missing {
                    line,
                    column: Column {
                        number: 1,
                        name: names[0].clone(),
                    },
                }
            } else {
                CsvError::BlankLine { line }
            });
        }
        let line = record.line;
        if rows == MAX_ROWS {
            return Err(CsvError::TooManyRows {
                line,
                limit: MAX_ROWS,
            });
        }
        if record.fields.len() != names.len() {
            return Err(CsvError::Ragged {
                line,
                found: record.fields.len(),
                expected: names.len(),
            });
        }
        for (c, field) in record.fields.into_iter().enumerate() {
            if Some(c) == index_at {
                labels.push(field);
                continue;
            }
            let column = || Column {
                number: c + 1,
                name: names[c].clone(),
            };
            if field.is_empty() {
                return Err(CsvError::Missing {
                    line,
                    column: column(),
                });
            }
            let shown = || field.chars().take(40).collect::<String>();
            let value: f64 = field.parse().map_err(|_| CsvError::NotANumber {
                line,
                column: column(),
                text: shown(),
            })?;
            if !value.is_finite() {
                return Err(CsvError::NotFinite {
                    line,
                    column: column(),
                    text: shown(),
                });
            }
            columns[c].push(value);
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(CsvError::NoRows { line: hline });
    }
    let mut index_out = None;
    let mut series = Vec::with_capacity(names.len());
    for (c, (name, values)) in names.into_iter().zip(columns).enumerate() {
        if Some(c) == index_at {
            index_out = Some(Index {
                name,
                labels: std::mem::take(&mut labels),
            });
        } else {
            series.push(NamedSeries { name, values });
        }
    }
    Ok(SeriesTable {
        index: index_out,
        series,
        rows,
    })
}

#[cfg(test)]
mod tests;
