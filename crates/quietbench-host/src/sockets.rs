//! Who holds the other end of a TCP connection on this machine: `/proc/net/tcp` and
//! `/proc/net/tcp6` list every socket of the network namespace with its owner's uid. A service
//! on plain loopback (`quietbench serve` without TLS) learns its local callers' uids from them,
//! as identd does, so that only its own user can call it; no other user can forge that row.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::HostRoot;

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    /// This end.
    pub local: SocketAddr,
    /// The other end (0.0.0.0:0 for a listening socket).
    pub remote: SocketAddr,
    /// The kernel's state number (1 established, 10 listening).
    pub state: u8,
    /// The socket owner's uid.
    pub uid: u32,
}

/// A row that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct SocketTableError {
    /// The line, from 1 (the header).
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

/// Parses `/proc/net/tcp` or `/proc/net/tcp6` (the header line, then one row per socket).
pub fn parse_tcp_table(text: &str) -> Result<Vec<TcpSocket>, SocketTableError> {
    text.lines()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| parse_row(line).map_err(|why| SocketTableError { line: i + 1, why }))
        .collect()
}

fn parse_row(line: &str) -> Result<TcpSocket, String> {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return Err(format!("{} fields, expected at least 8", fields.len()));
    }
    let state = u8::from_str_radix(fields[3], 16).map_err(|_| format!("state '{}'", fields[3]))?;
    let uid = fields[7]
        .parse()
        .map_err(|_| format!("uid '{}'", fields[7]))?;
    Ok(TcpSocket {
        local: parse_address(fields[1])?,
        remote: parse_address(fields[2])?,
        state,
        uid,
    })
}

/// `0100007F:B32F` (IPv4) or 32 hex digits and a port (IPv6). The address is the kernel's
/// 32-bit words in the machine's byte order, printed as hex; the port is plain hex.
fn parse_address(text: &str) -> Result<SocketAddr, String> {
    let bad = || format!("address '{text}'");
    let (ip, port) = text.split_once(':').ok_or_else(bad)?;
    let port = u16::from_str_radix(port, 16).map_err(|_| bad())?;
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(ip, 16)
                .map_err(|_| bad())?
                .to_ne_bytes(),
        )),
        32 => {
            let mut bytes = [0u8; 16];
            for (k, chunk) in bytes.chunks_mut(4).enumerate() {
                let hex = ip.get(k * 8..k * 8 + 8).ok_or_else(bad)?;
                chunk.copy_from_slice(
                    &u32::from_str_radix(hex, 16)
                        .map_err(|_| bad())?
                        .to_ne_bytes(),
                );
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return Err(bad()),
    };
    Ok(SocketAddr::new(ip, port))
}

/// The uid of the process that holds the `peer` end of a connection whose other end is `local`
/// (this process's), or None when no such socket is in the tables (the peer is not on this
/// machine, or the connection is gone).
pub fn peer_uid(
    root: &HostRoot,
    local: SocketAddr,
    peer: SocketAddr,
) -> Result<Option<u32>, String> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = match root.read(table) {
            Ok(text) => text,
            // A kernel without IPv6 has no tcp6.
            Err(e) if e.source.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.to_string()),
        };
        let rows = parse_tcp_table(&text).map_err(|e| format!("{table}: {e}"))?;
        if let Some(row) = rows
            .iter()
            .find(|r| same(r.local, peer) && same(r.remote, local))
        {
            return Ok(Some(row.uid));
        }
    }
    Ok(None)
}

/// Equal addresses, an IPv4-mapped IPv6 one (`::ffff:127.0.0.1`) equal to its IPv4 form.
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    a.port() == b.port() && canonical(a.ip()) == canonical(b.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::{dev_vm, dev_vm_file};

    // The capture: a listener of root's on 127.0.0.1:45871 and [::1]:45872, each with a
    // connection from a process of uid 65534 (nobody); see tests/fixtures/README.md.
    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn parses_the_captured_tables() {
        let v4 = parse_tcp_table(&dev_vm_file("proc/net/tcp")).unwrap();
        assert_eq!(v4.len(), 53);
        let listener = v4
            .iter()
            .find(|s| s.local == addr("127.0.0.1:45871") && s.state == 0x0A)
            .unwrap();
        assert_eq!((listener.uid, listener.remote), (0, addr("0.0.0.0:0")));
        let v6 = parse_tcp_table(&dev_vm_file("proc/net/tcp6")).unwrap();
        assert_eq!(v6.len(), 3);
        assert!(
            v6.iter()
                .any(|s| s.local == addr("[::1]:45872") && s.state == 0x0A)
        );
    }

    #[test]
    fn finds_the_uid_of_a_local_caller() {
        let root = dev_vm();
        // The server's side of each connection is (local: its port, peer: the client's).
        assert_eq!(
            peer_uid(&root, addr("127.0.0.1:45871"), addr("127.0.0.1:50150")).unwrap(),
            Some(65534)
        );
        assert_eq!(
            peer_uid(&root, addr("[::1]:45872"), addr("[::1]:47060")).unwrap(),
            Some(65534)
        );
        // The server's own row is root's; an unknown port is nobody's.
        assert_eq!(
            peer_uid(&root, addr("127.0.0.1:50150"), addr("127.0.0.1:45871")).unwrap(),
            Some(0)
        );
        assert_eq!(
            peer_uid(&root, addr("127.0.0.1:45871"), addr("127.0.0.1:1")).unwrap(),
            None
        );
    }

    #[test]
    fn a_mapped_address_is_its_ipv4_form_and_bad_rows_name_their_line() {
        assert!(same(addr("[::ffff:127.0.0.1]:80"), addr("127.0.0.1:80")));
        assert!(!same(addr("127.0.0.1:80"), addr("127.0.0.1:81")));
        let err = parse_tcp_table("header\n   0: 0100007F:B32F zz 0A 0 0 0 0\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.why.contains("address 'zz'"), "{err}");
        let err = parse_tcp_table("header\n   0: short\n").unwrap_err();
        assert!(err.why.contains("fields"), "{err}");
    }

    #[test]
    fn the_live_machine_knows_this_process_as_its_own_caller() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server_side, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let uid = peer_uid(&HostRoot::live(), listener.local_addr().unwrap(), peer).unwrap();
        assert_eq!(uid, Some(nix::unistd::geteuid().as_raw()));
    }
}
