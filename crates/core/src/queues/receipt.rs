//! Receipts: what a receive hands out to settle a message with, signed with a key
//! made once per store (HMAC-SHA256, truncated), so a forged or altered receipt is refused.

use hmac::{Hmac, Mac};

use super::*;

/// What a receipt names: one message of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Receipt {
    pub(super) sub_id: u64,
    pub(super) partition: u32,
    pub(super) offset: u64,
    pub(super) nonce: u64,
    /// Where the lease was when the receipt was issued (a hint: it may have moved since).
    pub(super) due: i64,
    pub(super) receives: u32,
}

const RECEIPT_BODY: usize = 40;

const RECEIPT_MAC: usize = 16;

/// Every receipt starts with this letter, so none starts with `-` (base64url's 63rd
/// character) and a command line never reads one as a flag. Receipts issued before it
/// carry no letter; they are told apart by length (75 characters against 76).
const RECEIPT_PREFIX: char = 'r';

/// How long a receipt without the letter is: 56 bytes in unpadded base64url.
const UNPREFIXED_LEN: usize = 75;

impl Receipt {
    pub(super) fn encode(&self, key: &ReceiptKey) -> String {
        let mut bytes = Vec::with_capacity(RECEIPT_BODY + RECEIPT_MAC);
        bytes.extend_from_slice(&self.sub_id.to_be_bytes());
        bytes.extend_from_slice(&self.partition.to_be_bytes());
        bytes.extend_from_slice(&self.offset.to_be_bytes());
        bytes.extend_from_slice(&self.nonce.to_be_bytes());
        bytes.extend_from_slice(&self.due.to_be_bytes());
        bytes.extend_from_slice(&self.receives.to_be_bytes());
        let tag = key.mac(&bytes).finalize().into_bytes();
        bytes.extend_from_slice(&tag[..RECEIPT_MAC]);
        let mut text = String::with_capacity(77);
        text.push(RECEIPT_PREFIX);
        URL_SAFE_NO_PAD.encode_string(bytes, &mut text);
        text
    }

    pub(super) fn decode(text: &str, key: &ReceiptKey) -> Option<Self> {
        let text = match text.len() {
            UNPREFIXED_LEN => text,
            _ => text.strip_prefix(RECEIPT_PREFIX)?,
        };
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        if bytes.len() != RECEIPT_BODY + RECEIPT_MAC {
            return None;
        }
        let (body, tag) = bytes.split_at(RECEIPT_BODY);
        // Compared in constant time: a forger learns nothing from how long a refusal takes.
        key.mac(body).verify_truncated_left(tag).ok()?;
        let u64_at = |i: usize| u64::from_be_bytes(body[i..i + 8].try_into().unwrap_or_default());
        Some(Self {
            sub_id: u64_at(0),
            partition: u32::from_be_bytes(body[8..12].try_into().unwrap_or_default()),
            offset: u64_at(12),
            nonce: u64_at(20),
            due: u64_at(28) as i64,
            receives: u32::from_be_bytes(body[36..40].try_into().unwrap_or_default()),
        })
    }
}

/// The store's receipt key, ready to sign: HMAC's keyed state is computed once (two of
/// SHA-256's four compressions per receipt), then cloned for each receipt.
#[derive(Clone)]
pub(super) struct ReceiptKey(Hmac<Sha256>);

impl ReceiptKey {
    pub(super) fn new(key: &[u8; 32]) -> Self {
        Self(Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length"))
    }

    /// The receipt's MAC over `body`: HMAC-SHA256 under the store's receipt key.
    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.0.clone();
        mac.update(body);
        mac
    }
}

impl Queues {
    /// The key receipts are signed with: made once per store, kept in it, then cached
    /// for the life of the process (it never changes, so a cached copy is never stale).
    pub(super) async fn receipt_key(&self) -> Result<&ReceiptKey, Error> {
        let key = self
            .local
            .receipt_key
            .get_or_try_init(|| async {
                let item_key = receipt_signing_key();
                for _ in 0..MAX_ATTEMPTS {
                    if let Some(item) = self.store().get(&item_key).await? {
                        let text = std::str::from_utf8(&item.value).unwrap_or_default();
                        let mut key = [0u8; 32];
                        for (i, byte) in key.iter_mut().enumerate() {
                            *byte = text
                                .get(2 * i..2 * i + 2)
                                .and_then(|h| u8::from_str_radix(h, 16).ok())
                                .ok_or_else(|| Error::Corrupt("receipt key".into()))?;
                        }
                        return Ok(ReceiptKey::new(&key));
                    }
                    let mut key = [0u8; 32];
                    for chunk in key.chunks_mut(8) {
                        chunk.copy_from_slice(&self.nonce().to_be_bytes());
                    }
                    let value = bytes::Bytes::from(layout::hex(&key));
                    match self.store().write(vec![WriteOp::create(item_key.clone(), value)]).await {
                        Ok(()) => return Ok(ReceiptKey::new(&key)),
                        Err(StorageError::ConditionFailed { .. }) => continue,
                        Err(e) => return Err(Error::from(e)),
                    }
                }
                Err(Error::Corrupt("receipt key could not be read or made".into()))
            })
            .await?;
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(sub_id: u64) -> Receipt {
        Receipt { sub_id, partition: 3, offset: 41, nonce: 7, due: 1_000, receives: 2 }
    }

    #[test]
    fn a_receipt_never_starts_with_a_dash_and_reads_back() {
        let key = ReceiptKey::new(&[9; 32]);
        // 0xF8… puts base64url's `-` (0b111110) first without the letter.
        for sub_id in [0, 0xF800_0000_0000_0000, u64::MAX] {
            let text = receipt(sub_id).encode(&key);
            assert!(text.starts_with(RECEIPT_PREFIX), "{text}");
            assert_eq!(Receipt::decode(&text, &key), Some(receipt(sub_id)));
        }
    }

    #[test]
    fn a_receipt_issued_before_the_letter_still_reads_back() {
        let key = ReceiptKey::new(&[9; 32]);
        let text = receipt(0xF800_0000_0000_0000).encode(&key);
        let old = &text[RECEIPT_PREFIX.len_utf8()..];
        assert_eq!(old.len(), UNPREFIXED_LEN);
        assert!(old.starts_with('-'));
        assert_eq!(Receipt::decode(old, &key), Some(receipt(0xF800_0000_0000_0000)));
        let mut forged = format!("x{old}");
        assert_eq!(Receipt::decode(&forged, &key), None);
        forged.replace_range(..1, "r");
        assert!(Receipt::decode(&forged, &key).is_some());
    }
}
