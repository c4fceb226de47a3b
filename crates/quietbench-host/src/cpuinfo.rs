//! /proc/cpuinfo: which processor this is (the "CPU lottery" of CONTEXT.md §1).

use serde::Serialize;

/// The processor model as /proc/cpuinfo describes its first CPU. Fields that the file does not
/// give (family/model/stepping on Arm, microcode in some guests) are `None`, never zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuIdentity {
    /// `vendor_id` (x86), or the Arm implementer's name.
    pub vendor: String,
    /// `model name`, or for Arm without one, the core's part name.
    pub model_name: String,
    /// `cpu family`.
    pub family: Option<u32>,
    /// `model`.
    pub model: Option<u32>,
    /// `stepping`.
    pub stepping: Option<u32>,
    /// `microcode`, as printed (e.g. `0x5003604`).
    pub microcode: Option<String>,
    /// Feature flags: `flags` on x86, `Features` on Arm.
    pub flags: Vec<String>,
}

/// /proc/cpuinfo had nothing that identifies a processor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "/proc/cpuinfo names no processor (no 'model name', 'vendor_id' or 'CPU implementer' line in its first block)"
)]
pub struct CpuInfoError;

/// Parses the first processor block of /proc/cpuinfo. Later blocks repeat the same model on
/// every machine quietbench targets (one socket type per instance), so the first one suffices.
pub fn parse_cpuinfo(text: &str) -> Result<CpuIdentity, CpuInfoError> {
    let mut vendor = None;
    let mut model_name = None;
    let mut family = None;
    let mut model = None;
    let mut stepping = None;
    let mut microcode = None;
    let mut arm_implementer = None;
    let mut arm_part = None;
    let mut flags = Vec::new();
    let mut seen_processor = false;

    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        if key == "processor" {
            if seen_processor {
                break; // second block: the first one is complete
            }
            seen_processor = true;
            continue;
        }
        match key {
            "vendor_id" => vendor = Some(value.to_string()),
            "model name" => model_name = Some(value.to_string()),
            "cpu family" => family = value.parse().ok(),
            "model" => model = value.parse().ok(),
            "stepping" => stepping = value.parse().ok(),
            "microcode" => microcode = Some(value.to_string()),
            "CPU implementer" => arm_implementer = Some(value.to_string()),
            "CPU part" => arm_part = Some(value.to_string()),
            "flags" | "Features" => flags = value.split_whitespace().map(String::from).collect(),
            _ => {}
        }
    }

    let vendor = vendor.or_else(|| arm_implementer.as_deref().map(arm_implementer_name));
    let model_name = model_name.or_else(|| arm_part.as_deref().map(arm_part_name));
    match (vendor, model_name) {
        (None, None) => Err(CpuInfoError),
        (vendor, model_name) => Ok(CpuIdentity {
            vendor: vendor.unwrap_or_default(),
            model_name: model_name.unwrap_or_default(),
            family,
            model,
            stepping,
            microcode,
            flags,
        }),
    }
}

/// Arm implementer codes (the MIDR_EL1 implementer field) of the clouds' Arm servers.
fn arm_implementer_name(code: &str) -> String {
    match code {
        "0x41" => "ARM".to_string(),
        "0x61" => "Apple".to_string(),
        "0xc0" => "Ampere".to_string(),
        other => format!("Arm implementer {other}"),
    }
}

/// Arm core part numbers of the clouds' Arm servers (Graviton 2/3/4, Ampere Altra, Cobalt).
fn arm_part_name(part: &str) -> String {
    match part {
        "0xd0c" => "Neoverse-N1".to_string(),
        "0xd40" => "Neoverse-V1".to_string(),
        "0xd49" => "Neoverse-N2".to_string(),
        "0xd4f" => "Neoverse-V2".to_string(),
        other => format!("Arm part {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV_VM: &str = include_str!("../tests/fixtures/kvm-2vcpu-xeon/proc/cpuinfo");

    #[test]
    fn reads_the_development_vm() {
        let cpu = parse_cpuinfo(DEV_VM).unwrap();
        assert_eq!(cpu.vendor, "GenuineIntel");
        assert_eq!(cpu.model_name, "Intel(R) Xeon(R) Processor");
        assert_eq!(cpu.family, Some(6));
        assert_eq!(cpu.model, Some(207));
        assert_eq!(cpu.stepping, Some(2));
        assert_eq!(cpu.microcode.as_deref(), Some("0x1"));
        assert!(cpu.flags.iter().any(|f| f == "hypervisor"));
        assert!(cpu.flags.iter().any(|f| f == "avx512f"));
    }

    #[test]
    fn reads_an_ec2_cascade_lake() {
        let text = include_str!("../tests/fixtures/public/ec2-8259cl-2vcpu/proc/cpuinfo");
        let cpu = parse_cpuinfo(text).unwrap();
        assert_eq!(cpu.vendor, "GenuineIntel");
        assert_eq!(
            cpu.model_name,
            "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
        );
        assert_eq!(
            (cpu.family, cpu.model, cpu.stepping),
            (Some(6), Some(85), Some(7))
        );
        assert_eq!(cpu.microcode.as_deref(), Some("0x5003801"));
    }

    #[test]
    fn reads_a_graviton2_which_has_no_model_name() {
        let text = include_str!("../tests/fixtures/public/ec2-t4g-small-graviton2/proc/cpuinfo");
        let cpu = parse_cpuinfo(text).unwrap();
        assert_eq!(cpu.vendor, "ARM");
        assert_eq!(cpu.model_name, "Neoverse-N1");
        assert_eq!((cpu.family, cpu.model, cpu.stepping), (None, None, None));
        assert_eq!(cpu.microcode, None);
        assert!(cpu.flags.iter().any(|f| f == "asimd"), "{:?}", cpu.flags);
    }

    #[test]
    fn refuses_text_without_a_processor() {
        assert_eq!(parse_cpuinfo(""), Err(CpuInfoError));
        assert_eq!(
            parse_cpuinfo("garbage\n:::\nflags : fpu\n"),
            Err(CpuInfoError)
        );
    }

    #[test]
    fn a_truncated_file_gives_what_it_has_and_none_for_the_rest() {
        // The first 5 lines of the captured file: the block stops before stepping/microcode.
        let head: String = DEV_VM.lines().take(5).map(|l| format!("{l}\n")).collect();
        let cpu = parse_cpuinfo(&head).unwrap();
        assert_eq!(cpu.model_name, "Intel(R) Xeon(R) Processor");
        assert_eq!(cpu.stepping, None);
        assert_eq!(cpu.microcode, None);
    }

    #[test]
    fn unparsable_numbers_are_none_not_zero() {
        let text = DEV_VM.replacen("stepping\t: 2", "stepping\t: unknown", 1);
        assert_ne!(text, DEV_VM, "the fixture should contain the stepping line");
        assert_eq!(parse_cpuinfo(&text).unwrap().stepping, None);
    }
}
