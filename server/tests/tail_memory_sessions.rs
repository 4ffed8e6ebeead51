//! The replay tail's real memory stays within its budget when every frame is of a new session,
//! so that each session's own entry weighs as much as its frames.

#[path = "support/tail_memory.rs"]
mod tail_memory;

#[test]
fn the_tail_stays_within_its_budget_with_a_session_per_frame() {
    let Some(ratio) = tail_memory::resident_ratio(16 << 20, |seq| format!("s-{seq}")) else {
        eprintln!("no /proc/self/status: not measured");
        return;
    };
    assert!(ratio <= 1.0, "the tail takes {ratio:.2} times its budget");
}
