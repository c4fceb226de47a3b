//! The kernel's CPU list format ("0-3,8,10-11"), used by /sys/devices/system/cpu/online,
//! smp_affinity_list, isolcpus= and quietbench's own `--cpus`.

/// A CPU list that is not in the kernel's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// A piece is not a number or a range.
    #[error("'{piece}' in CPU list '{list}' is not a CPU number or a range like 2-5")]
    BadPiece {
        /// The whole list.
        list: String,
        /// The piece that failed.
        piece: String,
    },
    /// A range runs backwards.
    #[error("range '{piece}' in CPU list '{list}' runs backwards")]
    Backwards {
        /// The whole list.
        list: String,
        /// The piece that failed.
        piece: String,
    },
    /// A CPU number beyond any machine's (the kernel's limit is 8192).
    #[error("CPU {cpu} in CPU list '{list}' is beyond the kernel's limit of 8191")]
    TooLarge {
        /// The whole list.
        list: String,
        /// The offending CPU id.
        cpu: u32,
    },
}

/// The highest CPU id Linux supports (CONFIG_NR_CPUS maximum is 8192).
const MAX_CPU: u32 = 8191;

/// Parses a CPU list such as `0-3,8` into ascending, de-duplicated CPU ids. An empty list (or
/// only whitespace) is empty, as the kernel prints for an empty set.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, CpuListError> {
    let list = text.trim();
    let mut cpus = Vec::new();
    if list.is_empty() {
        return Ok(cpus);
    }
    let bad = |piece: &str| CpuListError::BadPiece {
        list: list.to_string(),
        piece: piece.to_string(),
    };
    for piece in list.split(',') {
        let piece = piece.trim();
        let (first, last) = match piece.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<u32>().map_err(|_| bad(piece))?,
                b.trim().parse::<u32>().map_err(|_| bad(piece))?,
            ),
            None => {
                let cpu = piece.parse::<u32>().map_err(|_| bad(piece))?;
                (cpu, cpu)
            }
        };
        if last < first {
            return Err(CpuListError::Backwards {
                list: list.to_string(),
                piece: piece.to_string(),
            });
        }
        if last > MAX_CPU {
            return Err(CpuListError::TooLarge {
                list: list.to_string(),
                cpu: last,
            });
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPU ids in the kernel's compact list format, e.g. `[0,1,2,5]` as `0-2,5`.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("5").unwrap(), vec![5]);
        assert_eq!(parse_cpu_list(" \n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("3,1,1-2").unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn rejects_bad_input_with_the_piece_named() {
        let err = parse_cpu_list("0-3,x").unwrap_err();
        assert!(err.to_string().contains("'x'"), "{err}");
        assert!(matches!(
            parse_cpu_list("4-2"),
            Err(CpuListError::Backwards { .. })
        ));
        assert!(matches!(
            parse_cpu_list("0-99999"),
            Err(CpuListError::TooLarge { .. })
        ));
        assert!(parse_cpu_list("1,,2").is_err());
        assert!(parse_cpu_list("-1").is_err());
    }

    #[test]
    fn formats_compactly_and_round_trips() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_cpu_list(&[]), "");
        for list in ["0", "0-1", "1,3,5-9,12"] {
            assert_eq!(format_cpu_list(&parse_cpu_list(list).unwrap()), list);
        }
    }

    #[test]
    fn parses_the_captured_online_file() {
        let online = include_str!("../tests/fixtures/kvm-2vcpu-xeon/sys/devices/system/cpu/online");
        assert_eq!(parse_cpu_list(online).unwrap(), vec![0, 1]);
    }
}
