//! The JSON of the broker's config files, read strictly and written as the Python side writes
//! it (`rmqstore._configfile`: `json.dumps(doc, indent=4)`, ASCII, a final newline), so a file
//! written by either reads the same in both.
//!
//! Strict where RocketMQ's fastjson2 guesses: a key given twice in one object, an integer
//! outside a Java `long`, `NaN`/`Infinity`, trailing text or nesting deeper than
//! [`MAX_DEPTH`] make the text undecodable. fastjson's bare integer keys (`{0:12}`) are read.

use std::fmt::Write as _;

/// Deepest nesting read (Python's decoder stops near its recursion limit, about 1,000).
pub(crate) const MAX_DEPTH: usize = 512;

/// A JSON value; objects keep their keys' order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i64),
    /// A number with a fraction or exponent, as its text (finite).
    Float(String),
    Str(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) | Value::Float(_) => "number",
            Value::Str(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
}

/// Why a text was not read: [`Syntax`](ParseError::Syntax) for text that is not JSON,
/// [`Strict`](ParseError::Strict) for JSON a Java reader would have to guess at (the Python
/// side reports the two as "not JSON (...)" and as the reason alone).
#[derive(Debug, PartialEq)]
pub(crate) enum ParseError {
    Syntax(String),
    Strict(String),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Syntax(m) => write!(f, "not JSON ({m})"),
            ParseError::Strict(m) => f.write_str(m),
        }
    }
}

impl From<String> for ParseError {
    fn from(m: String) -> ParseError {
        ParseError::Syntax(m)
    }
}

impl From<&str> for ParseError {
    fn from(m: &str) -> ParseError {
        ParseError::Syntax(m.to_string())
    }
}

/// Parses `text`; the error says why it is not acceptable.
pub(crate) fn parse(text: &str) -> Result<Value, ParseError> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.blank();
    let v = p.value(0)?;
    p.blank();
    if p.i != p.s.len() {
        return Err(ParseError::Syntax(format!("extra data at byte {}", p.i)));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn blank(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn err<T>(&self, what: &str) -> Result<T, ParseError> {
        Err(ParseError::Syntax(format!("{what} at byte {}", self.i)))
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth > MAX_DEPTH {
            return self.err("nested too deeply");
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.word("true", Value::Bool(true)),
            Some(b'f') => self.word("false", Value::Bool(false)),
            Some(b'n') => self.word("null", Value::Null),
            Some(_) => self.err("unexpected character"),
            None => self.err("unexpected end"),
        }
    }

    fn word(&mut self, w: &str, v: Value) -> Result<Value, ParseError> {
        if self.s[self.i..].starts_with(w.as_bytes()) {
            self.i += w.len();
            Ok(v)
        } else {
            self.err("unexpected word")
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.i += 1;
        let mut items: Vec<(String, Value)> = Vec::new();
        // Keys seen in this object (a table of millions of entries: no linear scan per key).
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        self.blank();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Value::Object(items));
        }
        loop {
            self.blank();
            let key = match self.peek() {
                Some(b'"') => self.string()?,
                // fastjson writes Map<Integer, ...> keys bare: {0:12}.
                Some(b'-' | b'0'..=b'9') => {
                    let start = self.i;
                    self.i += 1;
                    while matches!(self.peek(), Some(b'0'..=b'9')) {
                        self.i += 1;
                    }
                    let key = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                    if key == "-" {
                        return self.err("bad key");
                    }
                    key.to_string()
                }
                _ => return self.err("expected a key"),
            };
            if !seen.insert(key.clone()) {
                let shown: String = key.chars().take(200).collect();
                return Err(ParseError::Strict(format!(
                    "key '{shown}' appears twice in one object"
                )));
            }
            self.blank();
            if self.peek() != Some(b':') {
                return self.err("expected ':'");
            }
            self.i += 1;
            self.blank();
            let v = self.value(depth + 1)?;
            items.push((key, v));
            self.blank();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(items));
                }
                _ => return self.err("expected ',' or '}'"),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.i += 1;
        let mut items = Vec::new();
        self.blank();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.blank();
            items.push(self.value(depth + 1)?);
            self.blank();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                _ => return self.err("expected ',' or ']'"),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let digits = self
            .s
            .get(self.i..self.i + 4)
            .ok_or("truncated \\u escape")?;
        let text = std::str::from_utf8(digits).map_err(|_| "bad \\u escape".to_string())?;
        let v = u32::from_str_radix(text, 16).map_err(|_| "bad \\u escape".to_string())?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.s.len() && !matches!(self.s[self.i], b'"' | b'\\' | 0..=0x1f) {
                self.i += 1;
            }
            out.push_str(
                std::str::from_utf8(&self.s[start..self.i])
                    .map_err(|e| ParseError::from(e.to_string()))?,
            );
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = self.peek().ok_or("truncated escape")?;
                    self.i += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi)
                                && self.s[self.i..].starts_with(b"\\u")
                            {
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return self.err("lone surrogate");
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            out.push(char::from_u32(code).ok_or("lone surrogate")?);
                        }
                        _ => return self.err("bad escape"),
                    }
                }
                Some(_) => return self.err("control character in a string"),
                None => return self.err("unterminated string"),
            }
        }
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return self.err("bad number"),
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            float = true;
            self.i += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return self.err("bad number");
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            float = true;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return self.err("bad number");
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        if float {
            let v: f64 = text.parse().map_err(|_| "bad number".to_string())?;
            if !v.is_finite() {
                return Err(ParseError::Strict(format!(
                    "number {} is out of range",
                    &text[..text.len().min(40)]
                )));
            }
            return Ok(Value::Float(text.to_string()));
        }
        text.parse::<i64>().map(Value::Int).map_err(|_| {
            let digits = text.trim_start_matches('-').len();
            ParseError::Strict(format!(
                "an integer of {digits} digits is outside a Java long"
            ))
        })
    }
}

/// `v` as the Python side writes a config file: indent 4, ", "-free item ends, ": " after
/// keys, ASCII only, a final newline.
pub(crate) fn dump(v: &Value) -> Vec<u8> {
    let mut out = String::new();
    write_value(&mut out, v, 0);
    out.push('\n');
    out.into_bytes()
}

fn indent(out: &mut String, level: usize) {
    out.push('\n');
    for _ in 0..level * 4 {
        out.push(' ');
    }
}

fn write_value(out: &mut String, v: &Value, level: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Float(text) => out.push_str(text),
        Value::Str(s) => quote(out, s),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Object(items) if items.is_empty() => out.push_str("{}"),
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                indent(out, level + 1);
                write_value(out, item, level + 1);
            }
            indent(out, level);
            out.push(']');
        }
        Value::Object(items) => {
            out.push('{');
            for (n, (k, item)) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                indent(out, level + 1);
                quote(out, k);
                out.push_str(": ");
                write_value(out, item, level + 1);
            }
            indent(out, level);
            out.push('}');
        }
    }
}

/// A string as Python's json.dumps writes it with ensure_ascii.
fn quote(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_strictly_and_writes_as_python_does() {
        let v = parse(r#"{"offsetTable": {"T@g": {0: 12, "1": 7}}, "x": [1.5e3, null, "é\n"]}"#)
            .unwrap();
        let text = String::from_utf8(dump(&v)).unwrap();
        let want = "{\n    \"offsetTable\": {\n        \"T@g\": {\n            \"0\": 12,\n            \"1\": 7\n        }\n    },\n    \"x\": [\n        1.5e3,\n        null,\n        \"\\u00e9\\n\"\n    ]\n}\n";
        assert_eq!(text, want);
        let twice = parse(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert_eq!(twice.to_string(), "key 'a' appears twice in one object");
        let long = parse("99999999999999999999").unwrap_err();
        assert_eq!(
            long.to_string(),
            "an integer of 20 digits is outside a Java long"
        );
        let extra = parse("{} x").unwrap_err().to_string();
        assert!(extra.starts_with("not JSON (extra data"), "{extra}");
        assert!(parse("NaN").is_err());
        let deep = parse(&"[".repeat(MAX_DEPTH + 2)).unwrap_err();
        assert!(deep.to_string().contains("nested"));
        assert_eq!(parse(r#""\ud83d\ude00""#).unwrap(), Value::Str("😀".into()));
        assert_eq!(dump(&Value::Str("😀".into())), b"\"\\ud83d\\ude00\"\n");
        assert_eq!(dump(&Value::Object(vec![])), b"{}\n");
    }
}
