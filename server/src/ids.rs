//! Random ids, the one generator of the server's ids, epochs and node names: characters of
//! `[0-9a-z]` from the thread-local CSPRNG (ChaCha, seeded from the OS).

use rand::Rng;

const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// `n` random characters of `[0-9a-z]` (about 5.17 bits each).
pub(crate) fn random_chars(n: usize) -> String {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_length_and_alphabet_asked_and_differ() {
        let a = random_chars(20);
        assert_eq!(a.len(), 20);
        assert!(a.bytes().all(|b| ALPHABET.contains(&b)));
        assert_ne!(a, random_chars(20));
    }
}
