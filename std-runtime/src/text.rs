//! Small text helpers shared by the tools, MCP, the output cap, the prompt,
//! media and the gateway's message splitting.

/// The largest index `<= i` that is a char boundary of `s` (`s.len()` for
/// an `i` past the end).
pub fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest index `>= i` that is a char boundary of `s` (`s.len()` for
/// an `i` past the end).
pub fn ceil_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// `%XX` escapes decoded (any other byte kept as it is); `None` for a
/// malformed escape or a result that is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_round_down_and_up_inside_a_character() {
        let s = "aé€b"; // a(0) é(1..3) €(3..6) b(6)
        assert_eq!(floor_char_boundary(s, 2), 1);
        assert_eq!(ceil_char_boundary(s, 2), 3);
        assert_eq!(floor_char_boundary(s, 4), 3);
        assert_eq!(ceil_char_boundary(s, 4), 6);
        assert_eq!(floor_char_boundary(s, 3), 3);
        assert_eq!(ceil_char_boundary(s, 3), 3);
        assert_eq!(floor_char_boundary(s, 99), s.len());
        assert_eq!(ceil_char_boundary(s, 99), s.len());
    }
}
