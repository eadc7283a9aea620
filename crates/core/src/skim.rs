//! A JSON object's members, checked and cut out as text in one quick pass ([`members`]), and
//! JSON text so checked made a `RawValue` with no second parse ([`borrowed`], [`boxed`]): how
//! the proxy reads the envelope of each message and the head of each request's params on the
//! call path. And [`Word`]: a word looked for in a text before it is parsed.
//!
//! Why not serde_json alone: serde_json checks a string a word (8 bytes) at a time; a
//! message's bulk is one or two long strings (a tool's arguments, its result), and the call path
//! read each of them three times, about a sixth of the instructions the stdio face spends on a
//! call of 1 KiB (docs/BENCHMARKS.md). Here a string's end is found with `memchr` (vector
//! instructions) and its bytes checked for control characters 64 at a time.
//!
//! It accepts only what serde_json accepts (a test goes through every short text over JSON's
//! characters, and proptest through longer ones), and it leaves to serde_json what it does not
//! need to know: a key with an escape, nesting deeper than [`MAX_DEPTH`], or a text that is
//! not well-formed. Its callers then read the text with serde_json, so that every answer (and
//! every error) is serde_json's. No I/O.

use serde::de::value::{BorrowedStrDeserializer, MapDeserializer};
use serde_json::value::RawValue;

/// The deepest nesting read here; deeper is left to serde_json (whose own limit is 128).
pub const MAX_DEPTH: usize = 64;

/// The members of the JSON object `text`, in order: each key (the text between its quotes) and
/// its value as JSON text (no whitespace around it), given to `member` as they are read.
///
/// `None`: `text` is not one well-formed JSON object (whitespace around it allowed), or it is
/// one this reader leaves to serde_json (a key with an escape, nesting deeper than
/// [`MAX_DEPTH`]). Then what `member` was given must be forgotten, and the text read by
/// serde_json.
pub fn members<'a>(text: &'a str, mut member: impl FnMut(&'a str, &'a str)) -> Option<()> {
    let mut scan = Scan {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let mut plain = true;
    scan.whitespace();
    scan.object(1, |key, escaped, value| {
        plain &= !escaped;
        if plain {
            member(key, value);
        }
    })?;
    scan.whitespace();
    (plain && scan.at == scan.bytes.len()).then_some(())
}

/// `json`, a member's value as [`members`] gave it, as a `RawValue` borrowed from it, not
/// parsed again (serde_json's `from_str` would read it whole a second time). Given text that
/// [`members`] did not check, the `RawValue` holds it as it is, well-formed or not: only the
/// call path's readers, on what they were just given, call it.
///
/// serde_json hands a raw value to `RawValue`'s own `Deserialize` as a map of one member, named
/// by its private name, whose value is the text; this gives it the same way. Should a later
/// serde_json do it otherwise, that fails: then `json` is parsed after all, so the answer is
/// never wrong, only slower (and a test here fails, to say so).
pub fn borrowed(json: &str) -> &RawValue {
    <&RawValue as serde::Deserialize>::deserialize(handed(json))
        .or_else(|_: serde::de::value::Error| serde_json::from_str(json))
        .unwrap_or(RawValue::NULL)
}

/// [`borrowed`], copied once: a `RawValue` of its own.
pub fn boxed(json: &str) -> Box<RawValue> {
    <Box<RawValue> as serde::Deserialize>::deserialize(handed(json))
        .or_else(|_: serde::de::value::Error| RawValue::from_string(json.to_owned()))
        .unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// A word looked for in JSON text before it is parsed (`progressToken`, `isError`, ...): most
/// messages lack it, and a look (with vector instructions) costs far less than a parse.
pub struct Word {
    word: &'static str,
    finder: std::sync::OnceLock<memchr::memmem::Finder<'static>>,
}

impl Word {
    pub const fn new(word: &'static str) -> Self {
        Self {
            word,
            finder: std::sync::OnceLock::new(),
        }
    }

    /// Whether `text` holds the word anywhere.
    pub fn in_text(&self, text: &str) -> bool {
        self.finder
            .get_or_init(|| memchr::memmem::Finder::new(self.word))
            .find(text.as_bytes())
            .is_some()
    }
}

/// The name by which serde_json's `RawValue` knows the one member it is handed as.
const RAW_VALUE: &str = "$serde_json::private::RawValue";

/// `json` as serde_json hands a raw value over.
fn handed<'a>(
    json: &'a str,
) -> MapDeserializer<
    'a,
    std::iter::Once<(
        &'static str,
        BorrowedStrDeserializer<'a, serde::de::value::Error>,
    )>,
    serde::de::value::Error,
> {
    MapDeserializer::new(std::iter::once((
        RAW_VALUE,
        BorrowedStrDeserializer::new(json),
    )))
}

/// A reader over JSON text; `at` is where it has read to.
struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// One value, at nesting `depth` (0 for a value at the top).
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(depth + 1, |_, _, _| {}),
            b'[' => self.array(depth + 1),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// An object at nesting `depth`, each member given to `member`: its key (the text between
    /// the quotes), whether the key has an escape, and its value as JSON text.
    fn object(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&'a str, bool, &'a str),
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.list(b'{', b'}', |scan| {
            let (key, escaped) = scan.string()?;
            scan.whitespace();
            scan.expect(b':')?;
            scan.whitespace();
            let start = scan.at;
            scan.value(depth)?;
            member(key, escaped, &scan.text[start..scan.at]);
            Some(())
        })
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.list(b'[', b']', |scan| scan.value(depth))
    }

    /// `open`, the items (each read by `item`) separated by commas, then `close`.
    fn list(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.expect(open)?;
        self.whitespace();
        if self.peek() == Some(close) {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            self.whitespace();
            match self.next()? {
                b',' => self.whitespace(),
                byte if byte == close => return Some(()),
                _ => return None,
            }
        }
    }

    /// A string: its text between the quotes, and whether it has an escape.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        self.expect(b'"')?;
        let start = self.at;
        let mut escaped = false;
        loop {
            let rest = &self.bytes[self.at..];
            // A key or a short value ends within a few bytes: they are looked at one by one
            // (a search costs more to start than that); past them, the rest is searched.
            let near = rest.len().min(SHORT);
            let stop = match rest[..near]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
            {
                Some(stop) => stop,
                None => {
                    let far = near + memchr::memchr2(b'"', b'\\', &rest[near..])?;
                    if has_control(&rest[near..far]) {
                        return None;
                    }
                    far
                }
            };
            self.at += stop;
            match self.next()? {
                // Both ends are ASCII quotes: a boundary of the text's characters.
                b'"' => return Some((self.text.get(start..self.at - 1)?, escaped)),
                b'\\' => escaped = true,
                _ => return None,
            }
            match self.next()? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                b'u' => {
                    let hex = self.bytes.get(self.at..self.at + 4)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    self.at += 4;
                }
                _ => return None,
            }
        }
    }

    /// A number: `-`, then `0` or digits not led by `0`, then a fraction and an exponent, each
    /// with at least one digit, as JSON writes them.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digit()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digit()?;
        }
        Some(())
    }

    /// At least one digit.
    fn digit(&mut self) -> Option<()> {
        self.next().filter(u8::is_ascii_digit)?;
        self.digits();
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }
}

/// How many bytes of a string are looked at one by one before the rest is searched.
const SHORT: usize = 16;

/// Whether `bytes` holds a control character (below 0x20), which a JSON string may not hold
/// unescaped: the least byte of each 64, which the compiler finds with vector instructions.
fn has_control(bytes: &[u8]) -> bool {
    let mut blocks = bytes.chunks_exact(64);
    for block in &mut blocks {
        if block.iter().fold(u8::MAX, |least, &b| least.min(b)) < 0x20 {
            return true;
        }
    }
    let mut rest = blocks.remainder().chunks_exact(16);
    for block in &mut rest {
        if block.iter().fold(u8::MAX, |least, &b| least.min(b)) < 0x20 {
            return true;
        }
    }
    rest.remainder().iter().any(|&b| b < 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The members serde_json reads from `text`, if it reads it as an object.
    fn by_serde(text: &str) -> Option<Vec<(String, String)>> {
        let members: crate::members::Members<'_> = serde_json::from_str(text).ok()?;
        Some(
            members
                .0
                .into_iter()
                .map(|(k, v)| (k.into_owned(), v.get().to_owned()))
                .collect(),
        )
    }

    fn by_skim(text: &str) -> Option<Vec<(String, String)>> {
        let mut read = Vec::new();
        members(text, |k, v| read.push((k.to_owned(), v.to_owned())))?;
        Some(read)
    }

    /// Whether `text` is one well-formed JSON value (whitespace around it allowed) by this
    /// reader.
    fn is_value(text: &str) -> bool {
        let mut scan = Scan {
            text,
            bytes: text.as_bytes(),
            at: 0,
        };
        scan.whitespace();
        if scan.value(0).is_none() {
            return false;
        }
        scan.whitespace();
        scan.at == scan.bytes.len()
    }

    /// What the skim reads, serde_json reads the same; and a value it calls one, serde_json
    /// reads whole as one.
    fn agrees(text: &str) {
        if let Some(skimmed) = by_skim(text) {
            assert_eq!(Some(skimmed), by_serde(text), "{text:?}");
        }
        if is_value(text) {
            assert!(
                serde_json::from_str::<&RawValue>(text).is_ok(),
                "{text:?}: a value here, not to serde_json"
            );
        }
    }

    /// Every text of up to 5 characters over JSON's own (and a control character, a letter, a
    /// multi-byte one), alone and as a member's value: whatever the skim accepts, serde_json
    /// accepts and reads the same.
    #[test]
    fn every_short_text_is_read_as_serde_json_reads_it() {
        const CHARS: [&str; 22] = [
            "{", "}", "[", "]", "\"", "\\", ":", ",", " ", "0", "1", "-", ".", "e", "+", "u", "t",
            "n", "a", "\u{1}", "é", "/",
        ];
        let mut texts = vec![String::new()];
        let mut checked = 0;
        for _ in 0..5 {
            let mut longer = Vec::with_capacity(texts.len() * CHARS.len());
            for text in &texts {
                for c in CHARS {
                    let text = format!("{text}{c}");
                    agrees(&text);
                    agrees(&format!(r#"{{"k":{text}}}"#));
                    agrees(&format!(r#"{{"k":"{text}"}}"#));
                    checked += 1;
                    longer.push(text);
                }
            }
            texts = longer;
        }
        assert!(checked > 5_000_000, "{checked}");
    }

    /// The messages of the call path go the quick way, and their members are read right.
    #[test]
    fn messages_are_read_the_quick_way() {
        let call = r#"{"method":"tools/call","params":{"name":"echo","arguments":{"message":"x\"y\\z\u00e9 é"},"_meta":{"progressToken":3}},"jsonrpc":"2.0","id":12}"#;
        assert_eq!(by_skim(call), by_serde(call));
        assert_eq!(
            by_skim(call).expect("read").len(),
            4,
            "every member: {call}"
        );
        let answer = " {\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"Echo: x\"}],\"isError\":false,\"n\":-1.5e+3},\"jsonrpc\":\"2.0\",\"id\":\"a\"} \n";
        assert_eq!(by_skim(answer), by_serde(answer));
        assert_eq!(by_skim("{}"), Some(Vec::new()));
    }

    /// What it leaves to serde_json: a key with an escape, nesting past its limit, and every
    /// text that is not one well-formed object.
    #[test]
    fn what_it_leaves_to_serde_json() {
        assert_eq!(by_skim(r#"{"na\u006de":1}"#), None);
        let deep = format!(
            "{{\"k\":{}{}}}",
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        assert_eq!(by_skim(&deep), None);
        let fits = format!(
            "{{\"k\":{}{}}}",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        assert!(by_skim(&fits).is_some());
        for bad in [
            "",
            "[1]",
            "{\"a\":1}x",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":\"\u{1f}\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":tru}",
            "{\"a\":1,}",
            "{\"a\" 1}",
        ] {
            assert_eq!(by_skim(bad), None, "{bad:?}");
        }
    }

    /// A word is found wherever it lies, and only where it is whole.
    #[test]
    fn a_word_is_found_anywhere() {
        static WORD: Word = Word::new("isError");
        for at in 0..200 {
            let mut text = "x".repeat(200);
            text.insert_str(at, "isError");
            assert!(WORD.in_text(&text), "at {at}");
            text.replace_range(at..at + 1, "I");
            assert!(!WORD.in_text(&text), "at {at}");
        }
    }

    /// A control character is found wherever it lies in a long string (the 32-byte blocks and
    /// what is left after them).
    #[test]
    fn a_control_character_is_found_anywhere() {
        for at in 0..200 {
            let mut text = "x".repeat(200);
            text.replace_range(at..at + 1, "\t");
            assert_eq!(by_skim(&format!(r#"{{"k":"{text}"}}"#)), None, "at {at}");
        }
    }

    /// The raw value is the text itself, borrowed or copied, made without a second parse: if
    /// serde_json ever took its raw value otherwise, this fails (and `borrowed` and `boxed`
    /// parse instead, still right).
    #[test]
    fn raw_values_are_the_text_itself() {
        for json in [r#"{"a":[1,"x\"y"]}"#, "null", "\"é\"", "-0.5e7"] {
            let raw =
                <&RawValue as serde::Deserialize>::deserialize(handed(json)).expect("handed over");
            assert_eq!(raw.get(), json);
            assert!(std::ptr::eq(raw.get(), json), "borrowed, not copied");
            let raw = <Box<RawValue> as serde::Deserialize>::deserialize(handed(json))
                .expect("handed over");
            assert_eq!(raw.get(), json);
            assert!(std::ptr::eq(borrowed(json).get(), json));
            assert_eq!(boxed(json).get(), json);
        }
    }

    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            any::<f64>().prop_map(|f| serde_json::to_string(&f).unwrap_or_default()),
            any::<i64>().prop_map(|i| i.to_string()),
            any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((any::<String>(), inner), 0..6).prop_map(|m| {
                    let members: Vec<String> = m
                        .into_iter()
                        .map(|(k, v)| {
                            format!("{} : {v}", serde_json::to_string(&k).unwrap_or_default())
                        })
                        .collect();
                    format!("{{ {} }}", members.join(", "))
                }),
            ]
        })
    }

    proptest! {
        /// Well-formed objects of any content are read as serde_json reads them; cut or
        /// changed at any byte, still never accepted where serde_json refuses.
        #[test]
        fn objects_are_read_as_serde_json_reads_them(
            members in prop::collection::vec((any::<String>(), json_text()), 0..5),
            cut in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let text = format!(
                "{{{}}}",
                members
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let plain_keys = members.iter().all(|(k, _)| !serde_json::to_string(k).unwrap_or_default().contains('\\'));
            if plain_keys {
                prop_assert_eq!(by_skim(&text), by_serde(&text));
            }
            agrees(&text);
            let at = cut.index(text.len() + 1);
            if let Some(head) = text.get(..at) {
                agrees(head);
                if byte.is_ascii() {
                    let changed = format!("{head}{}{}", byte as char, text.get(at + 1..).unwrap_or(""));
                    agrees(&changed);
                }
            }
        }
    }
}
