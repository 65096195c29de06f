//! Webster (Sainte-Laguë) apportionment, as Karmada divides replicas since v1.16: seats go one
//! at a time to the party with the highest `votes / (2·seats + 1)`; ties go to the party with
//! fewer seats, then by name in a direction fixed per binding by the parity of FNV-32a of its
//! UID — stable for one binding, varying across bindings, so no cluster is always favoured.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Direction of the name tie-break.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameOrder {
    /// The lexicographically smaller name wins a tie.
    Ascending,
    /// The lexicographically larger name wins a tie.
    Descending,
}

impl NameOrder {
    /// The order for a binding: ascending when FNV-32a of its UID is even, descending when odd.
    pub fn for_uid(uid: &str) -> NameOrder {
        if fnv32a(uid.as_bytes()).is_multiple_of(2) { NameOrder::Ascending } else { NameOrder::Descending }
    }
}

/// FNV-1a, 32 bits (Go's `hash/fnv.New32a`).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// One party: a name and its votes (a weight, or a cluster's available replicas).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Party {
    pub name: String,
    pub votes: i64,
}

impl Party {
    pub fn new(name: impl Into<String>, votes: i64) -> Party {
        Party { name: name.into(), votes }
    }
}

struct Contender<'a> {
    name: &'a str,
    votes: i64,
    seats: i32,
    order: NameOrder,
}

impl Contender<'_> {
    /// Whether `self` gets the next seat before `other`.
    fn cmp_priority(&self, other: &Self) -> Ordering {
        // votes_a / (2 s_a + 1) vs votes_b / (2 s_b + 1), exactly.
        let left = i128::from(self.votes) * (2 * i128::from(other.seats) + 1);
        let right = i128::from(other.votes) * (2 * i128::from(self.seats) + 1);
        left.cmp(&right).then_with(|| other.seats.cmp(&self.seats)).then_with(|| match self.order {
            NameOrder::Ascending => other.name.cmp(self.name),
            NameOrder::Descending => self.name.cmp(other.name),
        })
    }
}

impl PartialEq for Contender<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp_priority(other) == Ordering::Equal
    }
}
impl Eq for Contender<'_> {}
impl PartialOrd for Contender<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Contender<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cmp_priority(other)
    }
}

/// Hands `seats` seats to `parties` by the Webster method; returns each party's seats in the
/// order of `parties`. Parties with no votes get a seat only if every party has none.
pub fn apportion(seats: i32, parties: &[Party], order: NameOrder) -> Vec<i32> {
    if parties.is_empty() {
        return Vec::new();
    }
    let mut heap: BinaryHeap<(Contender<'_>, usize)> =
        parties.iter().enumerate().map(|(i, p)| (Contender { name: &p.name, votes: p.votes.max(0), seats: 0, order }, i)).collect();
    for _ in 0..seats.max(0) {
        let Some((mut top, i)) = heap.pop() else { break };
        top.seats += 1;
        heap.push((top, i));
    }
    let mut result = vec![0; parties.len()];
    for (contender, i) in heap {
        result[i] = contender.seats;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parties(list: &[(&str, i64)]) -> Vec<Party> {
        list.iter().map(|(n, v)| Party::new(*n, *v)).collect()
    }

    /// Karmada's vectors (`assignment_test.go`) and the Sainte-Laguë textbook example.
    #[test]
    fn apportionment_vectors() {
        let cases: &[(i32, &[(&str, i64)], &[i32])] = &[
            (12, &[("m1", 3), ("m2", 2), ("m3", 1)], &[6, 4, 2]),
            (13, &[("m1", 3), ("m2", 2), ("m3", 1)], &[7, 4, 2]),
            (14, &[("m1", 3), ("m2", 2), ("m3", 1)], &[7, 5, 2]),
            (9, &[("m1", 1), ("m2", 2)], &[3, 6]),
            (9, &[("m1", 1), ("m2", 3)], &[2, 7]),
            (8, &[("A", 100_000), ("B", 80_000), ("C", 30_000), ("D", 20_000)], &[3, 3, 1, 1]),
            (4, &[("Alpha", 1200), ("Beta", 900), ("Gamma", 400)], &[2, 1, 1]),
            (0, &[("m1", 1), ("m2", 2)], &[0, 0]),
        ];
        for (seats, list, want) in cases {
            for order in [NameOrder::Ascending, NameOrder::Descending] {
                assert_eq!(apportion(*seats, &parties(list), order), *want, "{seats} over {list:?} ({order:?})");
            }
        }
    }

    /// Equal priority and equal seats: the name order decides, both ways.
    #[test]
    fn tie_break_by_name_both_ways() {
        let cases: &[(i32, NameOrder, &[i32])] = &[
            (1, NameOrder::Ascending, &[1, 0, 0]),
            (1, NameOrder::Descending, &[0, 0, 1]),
            (2, NameOrder::Ascending, &[1, 1, 0]),
            (2, NameOrder::Descending, &[0, 1, 1]),
            (4, NameOrder::Ascending, &[2, 1, 1]),
            (4, NameOrder::Descending, &[1, 1, 2]),
        ];
        let list = parties(&[("a", 1), ("b", 1), ("c", 1)]);
        for (seats, order, want) in cases {
            assert_eq!(apportion(*seats, &list, *order), *want, "{seats} seats, {order:?}");
        }
    }

    /// Equal priority, unequal seats: fewer seats first, whatever the name order.
    #[test]
    fn tie_break_prefers_fewer_seats() {
        // Round 1: a (3) beats b (1). Round 2: a 3/3 = 1 ties b 1/1 = 1; b has fewer seats.
        for order in [NameOrder::Ascending, NameOrder::Descending] {
            assert_eq!(apportion(2, &parties(&[("a", 3), ("b", 1)]), order), vec![1, 1]);
        }
    }

    #[test]
    fn fnv32a_matches_go() {
        // Values of Go's hash/fnv New32a.
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }
}
