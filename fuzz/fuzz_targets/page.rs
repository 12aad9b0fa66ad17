//! The gateway's own list cursors (`catalog::page`).
//!
//! Input: 8 bytes of list version, 2 of list length, 2 of page size,
//! then the cursor. The cursor is tried as sent (lossy UTF-8) and as the
//! base64 of the rest, so the fuzzer also explores what a cursor decodes to.
//!
//! Checked: no cursor panics; an accepted cursor gives a contiguous page of
//! at most `page_size` items and a next cursor exactly when items remain;
//! that next cursor continues where the page ended and is refused as stale
//! by any other version; paging from the start covers every item once.

#![no_main]

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use junction::catalog::{page, PageError};
use libfuzzer_sys::fuzz_target;

/// Bounds on one input, so one exec stays cheap.
const MAX_ITEMS: usize = 1200;
const MAX_PAGE_SIZE: usize = 600;

fn header(data: &[u8]) -> Option<(u64, usize, usize, &[u8])> {
    let (version, rest) = data.split_first_chunk::<8>()?;
    let (len, rest) = rest.split_first_chunk::<2>()?;
    let (size, rest) = rest.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_le_bytes(*len)) % (MAX_ITEMS + 1);
    let size = 1 + usize::from(u16::from_le_bytes(*size)) % MAX_PAGE_SIZE;
    Some((u64::from_le_bytes(*version), len, size, rest))
}

/// One page from `cursor`; checks its shape and the cursor it hands out.
fn check_page(
    items: &[usize],
    version: u64,
    size: usize,
    cursor: Option<&str>,
) -> Option<String> {
    let (chunk, next) = match page(items, version, cursor, size) {
        Ok(answer) => answer,
        Err(PageError::Malformed(_) | PageError::Stale(_)) => {
            assert!(cursor.is_some(), "the first page never fails");
            return None;
        }
    };
    let start = chunk.first().copied().unwrap_or(items.len());
    let end = start + chunk.len();
    assert!(chunk.len() <= size);
    assert_eq!(chunk, items[start.min(items.len())..end.min(items.len())]);
    assert_eq!(
        next.is_some(),
        end < items.len(),
        "next cursor iff items remain"
    );
    if next.is_none() {
        assert!(chunk.len() == size || end == items.len());
    }
    let next = next?;
    assert_eq!(chunk.len(), size, "only the last page is short");
    let (following, _) = page(items, version, Some(&next), size).expect("own cursor accepted");
    assert_eq!(
        following.first(),
        Some(&end),
        "the next page starts where this one ended"
    );
    let other = version.wrapping_add(1);
    assert!(matches!(
        page(items, other, Some(&next), size),
        Err(PageError::Stale(_))
    ));
    Some(next)
}

fuzz_target!(|data: &[u8]| {
    let Some((version, len, size, rest)) = header(data) else {
        return;
    };
    let items: Vec<usize> = (0..len).collect();

    let sent = String::from_utf8_lossy(rest);
    check_page(&items, version, size, Some(&sent));
    let encoded = URL_SAFE_NO_PAD.encode(rest);
    check_page(&items, version, size, Some(&encoded));

    // From the start: every item once, in order.
    let mut seen = 0;
    let mut cursor = None;
    for _ in 0..=len / size + 1 {
        let (chunk, next) = page(&items, version, cursor.as_deref(), size).expect("own cursor");
        assert_eq!(chunk, items[seen..seen + chunk.len()]);
        seen += chunk.len();
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, len, "paging covers every item");
});
