//! A tool schema's compact form, made from its JSON text in one pass.
//!
//! The definitions are kept as text (`ToolSpec::parameters`, issue 39);
//! a small window has every one of them compacted at every start (the
//! default window of a model hermes knows nothing of is small), so the
//! compaction reads the text and writes the shorter text, building no tree.

/// `schema` — a JSON text, as a `SchemaText` holds it — without `description`
/// in any property schema or `items`, at any depth. The schema's own
/// `description` stays. Anything but an object is copied as it is.
pub fn without_descriptions(schema: &str) -> String {
    let mut out = String::with_capacity(schema.len());
    let mut text = Text { s: schema, at: 0 };
    text.schema(&mut out, false);
    out
}

/// A cursor over JSON text that is known to be valid (a `SchemaText`'s):
/// it finds where values end, and checks nothing else.
struct Text<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Text<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The text from `from` to the cursor.
    fn since(&self, from: usize) -> &'a str {
        self.s.get(from..self.at).unwrap_or_default()
    }

    /// Moves past the string that starts at the cursor (its `"`), from
    /// quote or backslash to the next with `memchr` (descriptions are most
    /// of a schema's text).
    fn skip_string(&mut self) {
        self.at += 1;
        let bytes = self.s.as_bytes();
        while let Some(i) = memchr::memchr2(b'"', b'\\', bytes.get(self.at..).unwrap_or_default()) {
            self.at += i + 1;
            if bytes.get(self.at - 1) == Some(&b'"') {
                return;
            }
            // A backslash: the byte after it is escaped.
            self.at += 1;
        }
        self.at = bytes.len();
    }

    /// Moves past the value at the cursor and returns its text.
    fn value(&mut self) -> &'a str {
        self.skip_space();
        let from = self.at;
        match self.peek() {
            Some(b'"') => self.skip_string(),
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                while let Some(b) = self.peek() {
                    match b {
                        b'"' => {
                            self.skip_string();
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.at += 1;
                }
            }
        }
        self.since(from)
    }

    /// The members of the object at the cursor, one call of `member` each
    /// (with the key's raw text, quotes included), the cursor left on the
    /// value; `member` moves past it.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str)) {
        self.at += 1; // `{`
        loop {
            self.skip_space();
            match self.peek() {
                None => return,
                Some(b'}') => {
                    self.at += 1;
                    return;
                }
                Some(b',') => self.at += 1,
                Some(_) => {
                    let key = self.value();
                    self.skip_space();
                    self.at += 1; // `:`
                    member(self, key);
                }
            }
        }
    }

    /// A schema: see [`without_descriptions`]; `nested` for a property's
    /// or an array's items' schema, whose `description` goes.
    fn schema(&mut self, out: &mut String, nested: bool) {
        self.skip_space();
        if self.peek() != Some(b'{') {
            out.push_str(self.value());
            return;
        }
        out.push('{');
        let mut first = true;
        self.members(|text, key| {
            let name = key_name(key);
            if nested && name == "description" {
                text.value();
                return;
            }
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(key);
            out.push(':');
            text.skip_space();
            match name.as_ref() {
                "properties" if text.peek() == Some(b'{') => {
                    out.push('{');
                    let mut first = true;
                    text.members(|text, property| {
                        if !first {
                            out.push(',');
                        }
                        first = false;
                        out.push_str(property);
                        out.push(':');
                        text.schema(out, true);
                    });
                    out.push('}');
                }
                "items" => text.schema(out, true),
                _ => out.push_str(text.value()),
            }
        });
        out.push('}');
    }
}

/// The name a key's raw text (quotes included) stands for: the text
/// between the quotes, unescaped when it holds an escape (`"descr\u0069ption"`
/// is `description` too).
fn key_name(raw: &str) -> std::borrow::Cow<'_, str> {
    if raw.contains('\\') {
        serde_json::from_str::<String>(raw).map_or(std::borrow::Cow::Borrowed(raw), Into::into)
    } else {
        std::borrow::Cow::Borrowed(raw.get(1..raw.len().saturating_sub(1)).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{Value, json};

    /// The tree form of the same rule: what the text form must agree with.
    fn tree_without_descriptions(schema: &Value, nested: bool) -> Value {
        let Some(object) = schema.as_object() else {
            return schema.clone();
        };
        let mut out = serde_json::Map::new();
        for (key, value) in object {
            let copied = match (key.as_str(), value) {
                ("description", _) if nested => continue,
                ("properties", Value::Object(properties)) => Value::Object(
                    properties
                        .iter()
                        .map(|(name, p)| (name.clone(), tree_without_descriptions(p, true)))
                        .collect(),
                ),
                ("items", items) => tree_without_descriptions(items, true),
                _ => value.clone(),
            };
            out.insert(key.clone(), copied);
        }
        Value::Object(out)
    }

    fn agrees(schema: &Value, text: &str) {
        let compacted = without_descriptions(text);
        let parsed: Value = serde_json::from_str(&compacted)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {compacted}"));
        assert_eq!(parsed, tree_without_descriptions(schema, false), "{text}");
    }

    #[test]
    fn nested_descriptions_go_and_everything_else_stays() {
        let schema = json!({"type": "object", "description": "top", "properties": {
            "description": {"type": "string", "description": "a parameter named description"},
            "files": {"type": "object", "description": "more", "properties": {
                "path": {"type": "string", "description": "where", "enum": ["a}", "b\"{"]}}},
            "list": {"type": "array", "items": {"type": "string", "description": "one"},
                     "description": "the items"},
            "tuple": {"type": "array", "items": [{"type": "string", "description": "kept"}]},
            "n": {"type": "integer", "minimum": -1.5e3, "default": null}},
            "required": ["description"]});
        agrees(&schema, &schema.to_string());
        // The same with the whitespace of a pretty text, and escaped keys.
        agrees(&schema, &serde_json::to_string_pretty(&schema).unwrap());
        let escaped = r#"{"properties": {"a": {"descr\u0069ption": "x", "type": "string"}}}"#;
        assert_eq!(
            without_descriptions(escaped),
            r#"{"properties":{"a":{"type":"string"}}}"#
        );
    }

    #[test]
    fn what_is_not_an_object_is_copied() {
        for text in ["true", "[1,{\"description\":2}]", "\"s\"", "{}"] {
            assert_eq!(without_descriptions(text), text);
        }
    }

    fn schema_like() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "[a-z\"\\\\{}é ]{0,8}".prop_map(Value::String),
        ];
        let key = prop_oneof![
            Just("description".to_owned()),
            Just("properties".to_owned()),
            Just("items".to_owned()),
            Just("type".to_owned()),
            "[a-z\"\\\\{ ]{0,5}",
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Compacting the text is compacting the tree, compact or pretty.
        #[test]
        fn the_text_form_agrees_with_the_tree_form(schema in schema_like()) {
            agrees(&schema, &schema.to_string());
            agrees(&schema, &serde_json::to_string_pretty(&schema).unwrap());
        }
    }
}
