//! The replay tail's real memory stays within its budget with frames spread over 1,000 sessions.

#[path = "support/tail_memory.rs"]
mod tail_memory;

#[test]
fn the_tail_stays_within_its_budget() {
    let Some(ratio) = tail_memory::resident_ratio(16 << 20, |seq| {
        format!("session-{}", (seq as usize * 7919) % 1000)
    }) else {
        eprintln!("no /proc/self/status: not measured");
        return;
    };
    assert!(ratio <= 1.0, "the tail takes {ratio:.2} times its budget");
}
