//! Ranking tools for a query (SPEC §13, `toolExposure: "search"`): BM25 over each tool's name,
//! title and description, and the names of its arguments, with the fields weighted (a word of
//! the name counts three times, an argument's name twice, a word of the description once).
//!
//! A small implementation, not a crate: the index is a map from word to postings built from the
//! tool definitions as JSON text, words are split at case changes, digits and punctuation
//! (`get_weatherForecast` → `get`, `weather`, `forecast`) and lowercased, and a query word also
//! matches longer words that start with it (at half weight), so `forecast` finds
//! `forecasts`. No I/O, no clock; the same catalog and query always rank the same way (ties
//! keep catalog order).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalization.
const B: f32 = 0.75;
/// How much a word counts by the field it is in.
const NAME_WEIGHT: f32 = 3.0;
const ARGUMENT_WEIGHT: f32 = 2.0;
const DESCRIPTION_WEIGHT: f32 = 1.0;
/// What a query word's match on a longer word (its prefix) counts, against an exact match.
const PREFIX_WEIGHT: f32 = 0.5;
/// The shortest query word matched as a prefix.
const PREFIX_MIN: usize = 3;

/// The searchable words of a catalog of tools.
#[derive(Debug, Default)]
pub struct Index {
    /// Word → (tool, weighted frequency of the word in the tool).
    postings: BTreeMap<String, Vec<(u32, f32)>>,
    /// Each tool's weighted length.
    lengths: Vec<f32>,
    average: f32,
}

impl Index {
    /// The index of `definitions` (MCP tool definitions as JSON text, in catalog order). A
    /// definition that is not an object is indexed with no words (never found).
    pub fn build<'a>(definitions: impl IntoIterator<Item = &'a str>) -> Self {
        let mut postings: BTreeMap<String, Vec<(u32, f32)>> = BTreeMap::new();
        let mut lengths = Vec::new();
        for (i, definition) in definitions.into_iter().enumerate() {
            let mut words: BTreeMap<String, f32> = BTreeMap::new();
            let mut length = 0.0;
            for (text, weight) in fields(definition) {
                for word in words_of(&text) {
                    *words.entry(word).or_default() += weight;
                    length += weight;
                }
            }
            let tool = u32::try_from(i).unwrap_or(u32::MAX);
            for (word, frequency) in words {
                postings.entry(word).or_default().push((tool, frequency));
            }
            lengths.push(length);
        }
        let average = if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().sum::<f32>() / lengths.len() as f32
        };
        Self {
            postings,
            lengths,
            average,
        }
    }

    /// How many tools it holds.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether it holds no tool.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The best `limit` tools for `query`, best first, as catalog positions with their scores;
    /// only tools that match a word of the query. Ties keep catalog order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(usize, f32)> {
        let mut query_words = words_of(query);
        query_words.sort();
        query_words.dedup();
        let mut scores = vec![0.0f32; self.lengths.len()];
        let n = self.lengths.len() as f32;
        for word in &query_words {
            let exact = self.postings.get(word).map(|p| (p, 1.0));
            let longer: Vec<_> = if word.chars().count() >= PREFIX_MIN {
                self.postings
                    .range::<str, _>((
                        std::ops::Bound::Excluded(word.as_str()),
                        std::ops::Bound::Unbounded,
                    ))
                    .take_while(|(w, _)| w.starts_with(word.as_str()))
                    .map(|(_, p)| (p, PREFIX_WEIGHT))
                    .collect()
            } else {
                Vec::new()
            };
            for (postings, weight) in exact.into_iter().chain(longer) {
                let df = postings.len() as f32;
                let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                for &(tool, frequency) in postings {
                    let Some(score) = scores.get_mut(tool as usize) else {
                        continue;
                    };
                    let length = self.lengths.get(tool as usize).copied().unwrap_or(0.0);
                    let norm = 1.0 - B + B * length / self.average.max(f32::MIN_POSITIVE);
                    *score += weight * idf * frequency * (K1 + 1.0) / (frequency + K1 * norm);
                }
            }
        }
        let mut ranked: Vec<(usize, f32)> = scores
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(limit);
        ranked
    }
}

/// The text of a definition's searchable fields, with their weights.
fn fields(definition: &str) -> Vec<(String, f32)> {
    #[derive(Deserialize, Default)]
    struct Schema<'a> {
        #[serde(borrow, default)]
        properties: Option<BTreeMap<String, &'a RawValue>>,
    }
    #[derive(Deserialize, Default)]
    struct Annotations {
        #[serde(default)]
        title: Option<String>,
    }
    #[derive(Deserialize)]
    struct Tool<'a> {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        description: Option<String>,
        #[serde(rename = "inputSchema", borrow, default)]
        input_schema: Option<Schema<'a>>,
        #[serde(default)]
        annotations: Option<Annotations>,
    }
    let Ok(tool) = serde_json::from_str::<Tool<'_>>(definition) else {
        return Vec::new();
    };
    let mut fields = Vec::new();
    fields.extend(tool.name.map(|t| (t, NAME_WEIGHT)));
    fields.extend(tool.title.map(|t| (t, DESCRIPTION_WEIGHT)));
    fields.extend(
        tool.annotations
            .and_then(|a| a.title)
            .map(|t| (t, DESCRIPTION_WEIGHT)),
    );
    fields.extend(tool.description.map(|t| (t, DESCRIPTION_WEIGHT)));
    if let Some(properties) = tool.input_schema.and_then(|s| s.properties) {
        fields.extend(properties.into_keys().map(|k| (k, ARGUMENT_WEIGHT)));
    }
    fields
}

/// The words of a text, lowercased: runs of letters or of digits, split where a lowercase
/// letter meets an uppercase one (`readFile` → `read`, `file`; `HTTPServer` → `http`, `server`).
pub fn words_of(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            flush(&mut word, &mut words);
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|p| chars.get(p)) {
            let next = chars.get(i + 1).copied();
            let case_break = c.is_uppercase()
                && (prev.is_lowercase()
                    || (prev.is_uppercase() && next.is_some_and(char::is_lowercase)));
            let digit_break = prev.is_alphanumeric() && prev.is_numeric() != c.is_numeric();
            if case_break || digit_break {
                flush(&mut word, &mut words);
            }
        }
        word.extend(c.to_lowercase());
    }
    flush(&mut word, &mut words);
    words
}

fn flush(word: &mut String, words: &mut Vec<String>) {
    if !word.is_empty() {
        words.push(std::mem::take(word));
    }
}
