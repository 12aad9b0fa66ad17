//! Keys written twice in one table of a YAML or JSON config.
//!
//! TOML refuses a key written twice; serde's JSON and YAML readers (and so
//! figment) keep the last one and say nothing. A mount copied and not
//! renamed would then replace the first without a word. This walks the
//! document once, as serde reads it, and names every key that repeats in
//! its table, by path (`mounts.a`, `limits.max_sessions`).

use std::{cell::RefCell, collections::HashSet, fmt};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The path of every key written twice in its table of a JSON document
/// (empty if none, or if the text is no JSON: that is said elsewhere).
pub fn in_json(text: &str) -> Vec<String> {
    let found = RefCell::new(Vec::new());
    let mut reader = serde_json::Deserializer::from_str(text);
    let _ = Walk::root(&found).deserialize(&mut reader);
    found.into_inner()
}

/// As [`in_json`], for a YAML document.
pub fn in_yaml(text: &str) -> Vec<String> {
    let found = RefCell::new(Vec::new());
    let _ = Walk::root(&found).deserialize(serde_yaml::Deserializer::from_str(text));
    found.into_inner()
}

/// One value of the document at `path`, its repeated keys put in `found`.
struct Walk<'a> {
    path: String,
    found: &'a RefCell<Vec<String>>,
}

impl<'a> Walk<'a> {
    fn root(found: &'a RefCell<Vec<String>>) -> Self {
        Walk {
            path: String::new(),
            found,
        }
    }

    fn at(&self, step: &str) -> Walk<'a> {
        let path = match self.path.is_empty() {
            true => step.to_owned(),
            false => format!("{}.{step}", self.path),
        };
        Walk {
            path,
            found: self.found,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(Key(key)) = map.next_key()? {
            let value = self.at(&key);
            if !seen.insert(key) {
                self.found.borrow_mut().push(value.path.clone());
            }
            map.next_value_seed(value)?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        while seq
            .next_element_seed(self.at(&index.to_string()))?
            .is_some()
        {
            index += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        // A YAML tag (`!name value`): its value is walked like any other.
        let (_, variant) = data.variant::<de::IgnoredAny>()?;
        de::VariantAccess::newtype_variant_seed(variant, self)
    }
}

/// A table's key as text, whatever scalar YAML wrote it as.
struct Key(String);

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a key")
    }
    fn visit_str<E>(self, key: &str) -> Result<Key, E> {
        Ok(Key(key.to_owned()))
    }
    fn visit_bool<E>(self, key: bool) -> Result<Key, E> {
        Ok(Key(key.to_string()))
    }
    fn visit_i64<E>(self, key: i64) -> Result<Key, E> {
        Ok(Key(key.to_string()))
    }
    fn visit_u64<E>(self, key: u64) -> Result<Key, E> {
        Ok(Key(key.to_string()))
    }
    fn visit_f64<E>(self, key: f64) -> Result<Key, E> {
        Ok(Key(key.to_string()))
    }
    fn visit_unit<E>(self) -> Result<Key, E> {
        Ok(Key("null".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_named_by_path() {
        let json = r#"{"mounts": {"a": {"url": "http://first"}, "b": {}, "a": {"url": "http://second"}},
            "limits": {"max_sessions": 5, "max_sessions": 7}, "list": [{"x": 1, "x": 2}]}"#;
        assert_eq!(
            in_json(json),
            ["mounts.a", "limits.max_sessions", "list.0.x"]
        );
        let yaml = "mounts:\n  a:\n    url: http://first\n  a:\n    url: http://second\n";
        assert_eq!(in_yaml(yaml), ["mounts.a"]);
        assert!(in_json(r#"{"a": {"x": 1}, "b": {"x": 1}}"#).is_empty());
        assert!(in_yaml("a: 1\nb: [1, 1]\n").is_empty());
    }
}
