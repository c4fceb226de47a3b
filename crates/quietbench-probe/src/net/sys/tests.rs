use super::*;

/// A whole RTM_GETQDISC dump as the kernel answered it, captured on a 2-vCPU KVM guest
/// (kernel 6.18): lo (ifindex 1) noqueue, eth0 (ifindex 4) pfifo_fast, then NLMSG_DONE.
const DUMP_2VCPU_KVM: &str = concat!(
    "9400000024000200010000008a4f0000000000000100000000000000ffffffff020000000c0001006e6f7175",
    "6575650005000c00000000003000070014000100000000000000000000000000000000001800030000000000",
    "000000000000000000000000000000002c000300000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000b000000024000200010000008a4f0000000000000400000000000000",
    "ffffffff020000000f000100706669666f5f6661737400001800020003000000010202020102000001010101",
    "0101010105000c0000000000300007001400010092c80f0000000000f2280000000000001800030000000000",
    "000000000000000000000000000000002c00030092c80f0000000000f2280000000000000000000000000000",
    "000000000000000000000000000000001400000003000200010000008a4f000000000000",
);

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn parses_a_captured_dump() {
    let dump = unhex(DUMP_2VCPU_KVM);
    for (ifindex, expected) in [(1, vec!["noqueue"]), (4, vec!["pfifo_fast"]), (2, vec![])] {
        let mut kinds = Vec::new();
        assert_eq!(parse_qdisc_dump(&dump, ifindex, &mut kinds), DumpPart::Done);
        assert_eq!(kinds, expected, "ifindex {ifindex}");
    }
}

/// One RTM_NEWQDISC message in the kernel's layout (header, tcmsg, TCA_KIND, TCA_OPTIONS),
/// for interfaces and kinds the captured dump lacks (fq under mq).
fn qdisc_message(ifindex: i32, kind: &str) -> Vec<u8> {
    let mut body = vec![0u8; 20];
    body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    let mut kind_attr = Vec::new();
    let value_len = kind.len() + 1;
    kind_attr.extend_from_slice(&((4 + value_len) as u16).to_ne_bytes());
    kind_attr.extend_from_slice(&libc::TCA_KIND.to_ne_bytes());
    kind_attr.extend_from_slice(kind.as_bytes());
    kind_attr.push(0);
    kind_attr.resize(align4(kind_attr.len()), 0);
    body.extend_from_slice(&kind_attr);
    body.extend_from_slice(&8u16.to_ne_bytes());
    body.extend_from_slice(&2u16.to_ne_bytes());
    body.extend_from_slice(&[1, 2, 3, 4]);
    let mut message = Vec::new();
    message.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    message.extend_from_slice(&36u16.to_ne_bytes());
    message.extend_from_slice(&[0; 10]);
    message.extend_from_slice(&body);
    message
}

#[test]
fn parses_kinds_of_one_interface() {
    let mut datagram = qdisc_message(2, "mq");
    datagram.extend(qdisc_message(2, "fq"));
    datagram.extend(qdisc_message(1, "noqueue"));
    let mut kinds = Vec::new();
    assert_eq!(parse_qdisc_dump(&datagram, 2, &mut kinds), DumpPart::More);
    assert_eq!(kinds, ["mq", "fq"]);
    let mut done = vec![0u8; 20];
    done[0..4].copy_from_slice(&20u32.to_ne_bytes());
    done[4..6].copy_from_slice(&3u16.to_ne_bytes());
    assert_eq!(parse_qdisc_dump(&done, 2, &mut kinds), DumpPart::Done);
}

#[test]
fn malformed_dumps_end_without_panicking() {
    let message = qdisc_message(2, "fq");
    for cut in 0..message.len() {
        let mut kinds = Vec::new();
        let _ = parse_qdisc_dump(&message[..cut], 2, &mut kinds);
    }
    let mut lying = message.clone();
    lying[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert_eq!(parse_qdisc_dump(&lying, 2, &mut Vec::new()), DumpPart::Done);
    let mut bad_attr = message;
    bad_attr[36..38].copy_from_slice(&200u16.to_ne_bytes());
    let mut kinds = Vec::new();
    parse_qdisc_dump(&bad_attr, 2, &mut kinds);
    assert!(kinds.is_empty());
}

#[test]
fn reads_this_hosts_loopback_qdisc() {
    // `tc qdisc show dev lo` shows "noqueue" on most hosts; whatever it is, the dump
    // names one, and loopback's traffic is not paced by fq unless someone installed it.
    let loopback = IpAddr::from([127, 0, 0, 1]);
    // SAFETY: a NUL-terminated literal.
    let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    let kinds = qdisc_kinds(lo as i32).unwrap();
    assert!(!kinds.is_empty());
    assert_eq!(
        fq_paces(loopback, loopback),
        Some(kinds.iter().any(|k| k == "fq"))
    );
}
