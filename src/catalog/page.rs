//! The gateway's own pagination of merged lists.
//!
//! Cursors are opaque to clients: base64 of `version:offset`, the version
//! of the list they page through (its names in order, hashed). A cursor
//! from another version is refused (the list changed under the client, so
//! an offset would skip or repeat items); the client lists again from the
//! start, as it would after `list_changed`.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};

/// Items per page. Large enough that a typical catalog is one page (many
/// clients only read the first: 20 mounts of 50 tools must not lose half
/// of them), small enough to bound one response (~275 KB for 1,000 tools).
pub const PAGE_SIZE: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("invalid cursor {0:?}: it was not issued by this gateway")]
    Malformed(String),
    #[error("cursor {0:?} is stale: the list changed, list again without a cursor")]
    Stale(String),
}

/// One page of `items` and the cursor of the next page, if any.
pub fn page<T: Clone>(
    items: &[T],
    version: u64,
    cursor: Option<&str>,
    page_size: usize,
) -> Result<(Vec<T>, Option<String>), PageError> {
    let start = match cursor {
        None => 0,
        Some(cursor) => {
            let (cursor_version, offset) =
                decode(cursor).ok_or_else(|| PageError::Malformed(cursor.to_owned()))?;
            if cursor_version != version {
                return Err(PageError::Stale(cursor.to_owned()));
            }
            if offset > items.len() {
                return Err(PageError::Malformed(cursor.to_owned()));
            }
            offset
        }
    };
    let end = start.saturating_add(page_size).min(items.len());
    let next = (end < items.len()).then(|| encode(version, end));
    Ok((items[start..end].to_vec(), next))
}

fn encode(version: u64, offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("{version}:{offset}"))
}

fn decode(cursor: &str) -> Option<(u64, usize)> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let (version, offset) = text.split_once(':')?;
    Some((version.parse().ok()?, offset.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_every_item_once() {
        let items: Vec<u32> = (0..7).collect();
        let mut seen = Vec::new();
        let mut cursor = None;
        for _ in 0..10 {
            let (chunk, next) = page(&items, 3, cursor.as_deref(), 3).unwrap();
            seen.extend(chunk);
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, items);
    }

    #[test]
    fn short_list_is_one_page_without_cursor() {
        let (chunk, next) = page(&[1, 2], 0, None, 3).unwrap();
        assert_eq!(chunk, vec![1, 2]);
        assert_eq!(next, None);
    }

    #[test]
    fn bad_cursors_are_refused() {
        let items = [1, 2, 3, 4];
        let (_, next) = page(&items, 1, None, 2).unwrap();
        let next = next.unwrap();
        assert!(matches!(
            page(&items, 2, Some(&next), 2),
            Err(PageError::Stale(_))
        ));
        assert!(matches!(
            page(&items, 1, Some("garbage!"), 2),
            Err(PageError::Malformed(_))
        ));
        let beyond = encode(1, 99);
        assert!(matches!(
            page(&items, 1, Some(&beyond), 2),
            Err(PageError::Malformed(_))
        ));
    }
}
