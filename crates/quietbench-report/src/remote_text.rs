//! Text that came from an agent, made safe for a terminal.
//!
//! An agent is another machine: its CPU model, host name, error messages and the stderr tails
//! they quote are whatever it sends. Printed raw, an escape sequence in them can recolour,
//! retitle or clear the user's terminal, hide what follows (`\x1b[8m`) or move the cursor over
//! lines already printed, and a newline or carriage return can forge a line that looks like the
//! controller's own ("quietbench: run ... stored"). [`escape_remote`] is the one place such text
//! is made printable; every terminal view of agent-supplied text goes through it.
//!
//! Escaped rather than dropped, so a mangled CPU model still shows what the agent sent.
//! Backslashes are left alone: `\n` typed by an agent prints as the same two characters a
//! newline escapes to, which is harmless (it forges nothing), and leaving them keeps the helper
//! idempotent, so text escaped twice on its way (an error quoted by another) reads the same.

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every character that could move the cursor, start an escape sequence or reorder
/// text written as a Rust-style escape: `\n`, `\r`, `\t`, and `\u{1b}` for the rest of the
/// control characters (C0, DEL, C1) and the bidirectional-override and -isolate marks (which
/// make a terminal show text in another order than it reads, "Trojan Source"). Borrowed when
/// there is nothing to escape.
pub fn escape_remote(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_newlines_are_shown_not_obeyed() {
        assert_eq!(
            escape_remote("Xeon\x1b[2J\x1b]0;pwned\x07"),
            "Xeon\\u{1b}[2J\\u{1b}]0;pwned\\u{7}"
        );
        assert_eq!(
            escape_remote("oops\nquietbench: run stored\r"),
            "oops\\nquietbench: run stored\\r"
        );
        assert_eq!(escape_remote("a\tb\x7f\u{9b}c"), "a\\tb\\u{7f}\\u{9b}c");
        assert_eq!(escape_remote("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    #[test]
    fn plain_text_is_borrowed_and_escaping_twice_changes_nothing() {
        for plain in [
            "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz",
            "",
            "µs, 東京",
            "C:\\x",
        ] {
            assert!(matches!(escape_remote(plain), Cow::Borrowed(_)), "{plain}");
        }
        let once = escape_remote("\x1b[31mred\n").into_owned();
        assert_eq!(escape_remote(&once), once);
    }
}
