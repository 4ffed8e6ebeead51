//! The PostgreSQL engine's unit tests; those that need a database run on `TURNSTREAM_TEST_DATABASE_URL`.

mod pipelined;
mod turn_round_trips;

use super::{dollar_params, BEGIN, BEGIN_READ, SCHEMA};

#[test]
fn every_transaction_sets_the_schema() {
    let set = format!("; SET LOCAL search_path TO {SCHEMA}");
    assert!(BEGIN.ends_with(&set), "{BEGIN}");
    assert!(BEGIN_READ.ends_with(&set), "{BEGIN_READ}");
}

#[test]
fn parameters_are_renumbered_for_postgres() {
    assert_eq!(
        dollar_params("SELECT ?1, ?2 WHERE a = ?1 AND b IN (?, ?) AND c > ? LIMIT ?12"),
        "SELECT $1, $2 WHERE a = $1 AND b IN ($1, $2) AND c > $3 LIMIT $12"
    );
}
