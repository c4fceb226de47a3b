//! `/proc/<pid>/smaps`: how one mapping of a process is backed, here whether by transparent huge
//! pages (the disk probes ask for them for their I/O buffers, and report whether they got them).

use crate::HostRoot;
use crate::proc_table::ParseError;
use crate::procstat::ProcStatError;

const SMAPS: &str = "/proc/<pid>/smaps";

/// The mapping of `/proc/<pid>/smaps` that holds an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmapsMapping {
    /// First byte of the mapping.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
    /// Bytes of it backed by transparent huge pages, in KiB (`AnonHugePages`); `None` where
    /// the kernel prints no such line (built without transparent huge pages).
    pub anon_huge_kib: Option<u64>,
}

impl SmapsMapping {
    /// The share of the mapping backed by huge pages, 0-100; 0 where the kernel has none.
    pub fn huge_page_pct(&self) -> f64 {
        let len = self.end.saturating_sub(self.start);
        if len == 0 {
            return 0.0;
        }
        let huge = self.anon_huge_kib.unwrap_or(0).saturating_mul(1024);
        (huge as f64 / len as f64 * 100.0).min(100.0)
    }
}

/// Finds the mapping that holds `addr` in the text of a smaps file; `None` when none does.
pub fn parse_smaps_mapping(text: &str, addr: u64) -> Result<Option<SmapsMapping>, ParseError> {
    let mut found: Option<SmapsMapping> = None;
    for (i, line) in text.lines().enumerate() {
        let first = line.split_whitespace().next().unwrap_or("");
        // A mapping's header starts with its range ("7ff93e600000-7ff93e800000"); its
        // fields are "Key: value" lines, and no key holds a dash.
        if first.contains('-') && !first.ends_with(':') {
            if found.is_some() {
                break; // the next mapping: the one we wanted has no AnonHugePages line
            }
            let (start, end) = parse_range(first).ok_or_else(|| ParseError::Line {
                file: SMAPS,
                line: i + 1,
                reason: format!("expected a mapping's address range, found {first:?}"),
            })?;
            if (start..end).contains(&addr) {
                found = Some(SmapsMapping {
                    start,
                    end,
                    anon_huge_kib: None,
                });
            }
            continue;
        }
        let Some(mapping) = found.as_mut() else {
            continue;
        };
        if let Some(value) = line.strip_prefix("AnonHugePages:") {
            let kib = value
                .trim()
                .strip_suffix("kB")
                .and_then(|n| n.trim().parse::<u64>().ok())
                .ok_or_else(|| ParseError::Line {
                    file: SMAPS,
                    line: i + 1,
                    reason: format!("expected \"AnonHugePages: <n> kB\", found {line:?}"),
                })?;
            mapping.anon_huge_kib = Some(kib);
            break;
        }
    }
    Ok(found)
}

fn parse_range(text: &str) -> Option<(u64, u64)> {
    let (start, end) = text.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    (start < end).then_some((start, end))
}

/// Reads the mapping of process `pid` that holds `addr`, below `root`.
pub fn read_smaps_mapping(
    root: &HostRoot,
    pid: u32,
    addr: u64,
) -> Result<Option<SmapsMapping>, ProcStatError> {
    let text = root.read(&format!("/proc/{pid}/smaps"))?;
    Ok(parse_smaps_mapping(&text, addr)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_fixtures::dev_vm;

    #[test]
    fn finds_the_huge_page_backed_io_buffers_of_a_disk_probe() {
        // The agent running disk.seq (128 KiB x QD16: one 2 MiB region of buffers).
        let root = dev_vm();
        for addr in [0x7ff9_3e60_0000, 0x7ff9_3e6a_1234, 0x7ff9_3e7f_ffff] {
            let mapping = read_smaps_mapping(&root, 14782, addr).unwrap().unwrap();
            assert_eq!(mapping.start, 0x7ff9_3e60_0000);
            assert_eq!(mapping.end, 0x7ff9_3e80_0000);
            assert_eq!(mapping.anon_huge_kib, Some(2048));
            assert_eq!(mapping.huge_page_pct(), 100.0);
        }
    }

    #[test]
    fn a_mapping_in_small_pages_reads_zero() {
        // The process's executable text: file-backed, no huge pages.
        let mapping = read_smaps_mapping(&dev_vm(), 14782, 0x5647_7b9f_0000)
            .unwrap()
            .unwrap();
        assert_eq!(mapping.anon_huge_kib, Some(0));
        assert_eq!(mapping.huge_page_pct(), 0.0);
    }

    #[test]
    fn an_unmapped_address_has_no_mapping() {
        assert_eq!(read_smaps_mapping(&dev_vm(), 14782, 0x10).unwrap(), None);
    }

    #[test]
    fn malformed_lines_are_errors_that_quote_them() {
        let header = "7ff93e600000-7ff93e800000 rw-p 00000000 00:00 0\n";
        let bad_value = format!("{header}AnonHugePages:      lots kB\n");
        let err = parse_smaps_mapping(&bad_value, 0x7ff9_3e60_0000).unwrap_err();
        assert!(err.to_string().contains("lots"), "{err}");
        let bad_range = "zz-7ff93e800000 rw-p 00000000 00:00 0\n";
        let err = parse_smaps_mapping(bad_range, 1).unwrap_err();
        assert!(err.to_string().contains("zz-7ff93e800000"), "{err}");
        // A mapping without the line (no transparent huge pages in the kernel): not an error.
        let mapping = parse_smaps_mapping(header, 0x7ff9_3e60_0000)
            .unwrap()
            .unwrap();
        assert_eq!(mapping.anon_huge_kib, None);
        assert_eq!(mapping.huge_page_pct(), 0.0);
    }

    #[test]
    fn a_missing_file_is_a_read_error() {
        let err = read_smaps_mapping(&dev_vm(), 1, 0).unwrap_err();
        assert!(matches!(err, ProcStatError::Read(_)), "{err}");
    }
}
