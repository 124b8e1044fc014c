//! Small text helpers shared by the tools, MCP and the output cap.

/// The largest index `<= i` that is a char boundary of `s`.
pub(crate) fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
