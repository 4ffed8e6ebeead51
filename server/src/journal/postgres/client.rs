//! A pooled connection of the PostgreSQL engine ([`PgClient`]), waited on from a blocking
//! thread: the journal's statements ([`Sql`]), its transaction control, and what it holds back
//! to send ahead of the next statement in one round trip.

use bytes::BytesMut;
use deadpool_postgres::{Object, Pool};
use tokio::runtime::Handle;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

use super::{dollar_params, pool_error, Statements, BEGIN};
use crate::error::{Error, Result, StorageFault};
use crate::journal::sql::{Backend, EventRow, Param, Row, Sql, Val};

/// A pooled connection, waited on from a blocking thread.
///
/// What needs no answer before the job goes on is held back and sent ahead of the next
/// statement, in the same round trip ([`PgClient::then`]): the journal's events, and the
/// writer's savepoints (a job's `SAVEPOINT` goes with its first statement, its `RELEASE` with
/// the next job's). A job that sends no statement of its own needs no savepoint on the server
/// at all: what it held back is kept, or dropped, right here.
pub(super) struct PgClient {
    client: Object,
    statements: std::sync::Arc<Statements>,
    rt: Handle,
    /// A statement failed since the transaction began or last rolled back (to a savepoint):
    /// PostgreSQL refuses everything else in it until then.
    failed: std::cell::Cell<bool>,
    /// A statement failed that no rollback to the job's savepoint undoes (one sent ahead of
    /// the savepoint, for an earlier job, or the savepoint itself): only a rollback of the
    /// whole transaction ends it. Its fault and message, for the batch it loses.
    broken: std::cell::RefCell<Option<(StorageFault, String)>>,
    /// What is held back to go ahead of the next statement, in order.
    ahead: std::cell::RefCell<Vec<Ahead>>,
    /// Where the savepoint of the job running now stands.
    savepoint: std::cell::Cell<Savepoint>,
}

/// What a transaction-control statement does with what is held back.
enum Held {
    /// Sends it first: it is part of what the statement keeps or undoes.
    Send,
    /// Drops it: the statement ends the transaction (or the savepoint) it was in.
    Drop,
}

/// Held back for the next round trip (see [`PgClient`]).
enum Ahead {
    /// How the transaction begins ([`BEGIN`] or [`BEGIN_READ`](super::BEGIN_READ)).
    Begin(&'static str),
    /// Journal events, sent as one statement.
    Events(Pending),
    /// `SAVEPOINT job`: the savepoint of the job running now.
    Savepoint,
    /// `RELEASE job`: the end of the savepoint of a job that kept its changes.
    Release,
    /// A statement whose answer the job does not read ([`Sql::execute_unanswered`]).
    Statement(Unanswered),
}

/// A statement held back: its text (with PostgreSQL's placeholders) and its parameters.
struct Unanswered {
    sql: String,
    params: Vec<OwnedParam>,
}

/// A [`Param`] that owns its text, to be sent later.
enum OwnedParam {
    Int(i64),
    Text(String),
    NullInt,
    NullText,
}

impl OwnedParam {
    fn of(p: &Param<'_>) -> OwnedParam {
        match p {
            Param::Int(v) => OwnedParam::Int(*v),
            Param::Text(v) => OwnedParam::Text((*v).to_string()),
            Param::NullInt => OwnedParam::NullInt,
            Param::NullText => OwnedParam::NullText,
        }
    }

    fn param(&self) -> Param<'_> {
        match self {
            OwnedParam::Int(v) => Param::Int(*v),
            OwnedParam::Text(v) => Param::Text(v),
            OwnedParam::NullInt => Param::NullInt,
            OwnedParam::NullText => Param::NullText,
        }
    }
}

/// Where the savepoint of the job running now stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Savepoint {
    /// None is open.
    None,
    /// Opened, and held back with everything the job did: nothing of it reached the server.
    Held,
    /// Opened on the server.
    Open,
}

/// Journal events held back, column by column (they are sent as arrays).
#[derive(Default)]
struct Pending {
    ids: Vec<i64>,
    sessions: Vec<String>,
    turns: Vec<Option<String>>,
    kinds: Vec<String>,
    ts: Vec<i64>,
    data: Vec<String>,
}

/// How held-back events are inserted: one statement, however many.
const INSERT_EVENTS: &str = "INSERT INTO events(id, session_id, turn_id, kind, ts, data)
     SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[],
                          $5::bigint[], $6::text[])";

type PgResult<T> = std::result::Result<T, tokio_postgres::Error>;

impl PgClient {
    /// Takes a connection from `pool` (waiting from a blocking thread).
    pub(super) fn get(
        pool: &Pool,
        statements: &std::sync::Arc<Statements>,
        rt: &Handle,
    ) -> Result<PgClient> {
        let client = rt.block_on(pool.get()).map_err(pool_error)?;
        Ok(PgClient {
            client,
            statements: statements.clone(),
            rt: rt.clone(),
            failed: std::cell::Cell::new(false),
            broken: std::cell::RefCell::new(None),
            ahead: std::cell::RefCell::new(Vec::new()),
            savepoint: std::cell::Cell::new(Savepoint::None),
        })
    }

    /// Runs `next` (the future of one statement, not yet polled) after sending what is held
    /// back, in the same round trip: every request is written before any answer is awaited,
    /// in order (the connection keeps it). Should one held back fail, the transaction is
    /// aborted and what follows fails with it; the first error is the answer.
    fn then<T>(&self, next: impl std::future::Future<Output = PgResult<T>>) -> Result<T> {
        let ahead = std::mem::take(&mut *self.ahead.borrow_mut());
        let savepoint_at = ahead.iter().position(|a| matches!(a, Ahead::Savepoint));
        #[cfg(test)]
        self.statements
            .round_trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (sent, r) = self.rt.block_on(self.send_ahead(&ahead, next));
        // Where the first failure was: the index of what was held back, or `ahead.len()` for
        // `next` itself.
        let first_failure = sent
            .iter()
            .position(Option::is_some)
            .or_else(|| r.as_ref().is_none_or(|r| r.is_err()).then_some(ahead.len()));
        let held = self.savepoint.get();
        match first_failure {
            None => {
                if held == Savepoint::Held && savepoint_at.is_some() {
                    self.savepoint.set(Savepoint::Open);
                }
                match r {
                    Some(r) => r.map_err(Error::from),
                    // (Never: a statement not sent follows a failure.)
                    None => Err(Error::Corrupt("a statement was not sent".into())),
                }
            }
            Some(at) => {
                // The job's own failure, which its savepoint undoes, only once the savepoint
                // stood: opened before, or sent ahead of what failed.
                let undoable = match held {
                    Savepoint::Open => true,
                    Savepoint::Held => savepoint_at.is_some_and(|s| s < at),
                    Savepoint::None => false,
                };
                self.savepoint.set(if undoable {
                    Savepoint::Open
                } else {
                    Savepoint::None
                });
                self.failed.set(true);
                let e = match sent.into_iter().flatten().next() {
                    Some(e) => e,
                    None => match r {
                        Some(Err(e)) => e,
                        // (Never: a failure was found above.)
                        _ => return Err(Error::Corrupt("a statement's failure was lost".into())),
                    },
                };
                self.statements.saw(&e);
                let e = Error::from(e);
                if !undoable {
                    let fault = e.storage_fault().unwrap_or(StorageFault::Unavailable);
                    self.broken
                        .borrow_mut()
                        .get_or_insert_with(|| (fault, e.to_string()));
                }
                Err(e)
            }
        }
    }

    /// Sends `ahead`, then `next`, and waits for every answer: each held-back statement's
    /// error (if it failed), and `next`'s (`None`: nothing was sent, as the statement of the
    /// events could not be prepared).
    async fn send_ahead<T>(
        &self,
        ahead: &[Ahead],
        next: impl std::future::Future<Output = PgResult<T>>,
    ) -> (Vec<Option<tokio_postgres::Error>>, Option<PgResult<T>>) {
        use futures::future::{FutureExt, LocalBoxFuture};
        if ahead.is_empty() {
            return (Vec::new(), Some(next.await));
        }
        // Prepared (or found prepared) before anything is sent: nothing may overtake the events.
        let insert =
            if self.statements.unnamed() || !ahead.iter().any(|a| matches!(a, Ahead::Events(_))) {
                None
            } else {
                match self.client.prepare_cached(INSERT_EVENTS).await {
                    Ok(stmt) => Some(stmt),
                    Err(e) => return Self::none_sent(ahead, e),
                }
            };
        // So are the statements held back (each prepared once per connection).
        let mut prepared = Vec::new();
        if !self.statements.unnamed() {
            for a in ahead {
                if let Ahead::Statement(u) = a {
                    match self.client.prepare_cached(&u.sql).await {
                        Ok(stmt) => prepared.push(stmt),
                        Err(e) => return Self::none_sent(ahead, e),
                    }
                }
            }
        }
        let mut prepared = prepared.iter();
        let mut requests: Vec<LocalBoxFuture<'_, PgResult<()>>> = ahead
            .iter()
            .map(|a| match a {
                Ahead::Events(p) => self.insert_events(p, insert.as_ref()).boxed_local(),
                Ahead::Begin(how) => self.client.batch_execute(how).boxed_local(),
                Ahead::Savepoint => self.client.batch_execute("SAVEPOINT job").boxed_local(),
                Ahead::Release => self.client.batch_execute("RELEASE job").boxed_local(),
                Ahead::Statement(u) => self.unanswered(u, prepared.next()).boxed_local(),
            })
            .collect();
        let held_back = async {
            let mut answers: Vec<Option<PgResult<()>>> = requests.iter().map(|_| None).collect();
            // Each polled in order: a request is written at its first poll.
            futures::future::poll_fn(|cx| {
                let mut waiting = false;
                for (request, answer) in requests.iter_mut().zip(answers.iter_mut()) {
                    if answer.is_none() {
                        match request.as_mut().poll(cx) {
                            std::task::Poll::Ready(r) => *answer = Some(r),
                            std::task::Poll::Pending => waiting = true,
                        }
                    }
                }
                if waiting {
                    std::task::Poll::Pending
                } else {
                    std::task::Poll::Ready(())
                }
            })
            .await;
            answers
                .into_iter()
                .map(|a| a.and_then(|r| r.err()))
                .collect::<Vec<_>>()
        };
        // `join` polls what is held back first: its requests are written before `next`'s.
        let (sent, r) = futures::future::join(held_back, next).await;
        (sent, Some(r))
    }

    /// What [`PgClient::send_ahead`] answers when it could send nothing: `e` as the failure of
    /// the first held back (`next` must not run without what goes ahead of it).
    fn none_sent<T>(
        ahead: &[Ahead],
        e: tokio_postgres::Error,
    ) -> (Vec<Option<tokio_postgres::Error>>, Option<PgResult<T>>) {
        let mut sent: Vec<_> = ahead.iter().map(|_| None).collect();
        sent[0] = Some(e);
        (sent, None)
    }

    /// Sends a statement held back: `stmt`, prepared, or its text as an unnamed statement.
    async fn unanswered(
        &self,
        u: &Unanswered,
        stmt: Option<&tokio_postgres::Statement>,
    ) -> PgResult<()> {
        let params: Vec<Param<'_>> = u.params.iter().map(OwnedParam::param).collect();
        match stmt {
            Some(stmt) => {
                let args: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
                self.client.execute(stmt, &args).await?
            }
            None => self.client.execute_typed(&u.sql, &typed(&params)).await?,
        };
        Ok(())
    }

    async fn insert_events(
        &self,
        p: &Pending,
        stmt: Option<&tokio_postgres::Statement>,
    ) -> PgResult<()> {
        let args: [(&(dyn ToSql + Sync), Type); 6] = [
            (&p.ids, Type::INT8_ARRAY),
            (&p.sessions, Type::TEXT_ARRAY),
            (&p.turns, Type::TEXT_ARRAY),
            (&p.kinds, Type::TEXT_ARRAY),
            (&p.ts, Type::INT8_ARRAY),
            (&p.data, Type::TEXT_ARRAY),
        ];
        match stmt {
            None => self.client.execute_typed(INSERT_EVENTS, &args).await?,
            Some(stmt) => {
                let values: Vec<&(dyn ToSql + Sync)> = args.iter().map(|(v, _)| *v).collect();
                self.client.execute(stmt, &values).await?
            }
        };
        Ok(())
    }

    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Whether a failed statement left the transaction unusable (see `failed` and `broken`).
    pub(super) fn spoiled(&self) -> bool {
        self.failed.get() || self.broken.borrow().is_some()
    }

    /// Why the transaction takes no more statements: the failure no savepoint undoes (one sent
    /// ahead of the job's savepoint kept it from opening), with its fault.
    fn aborted(&self) -> Error {
        match &*self.broken.borrow() {
            Some((fault, message)) => Error::storage(*fault, message.clone()),
            None => Error::storage(
                StorageFault::Unavailable,
                "a failed statement aborted the transaction",
            ),
        }
    }

    /// Once the transaction began or rolled back: nothing failed, nothing held back.
    fn fresh(&self) {
        self.failed.set(false);
        *self.broken.borrow_mut() = None;
        self.savepoint.set(Savepoint::None);
    }

    /// Runs one transaction-control statement (`sql`, fixed text), first sending what is held
    /// back, or dropping it with the transaction it was in (`held`).
    fn control(&self, sql: &str, held: Held) -> Result<()> {
        if let Held::Drop = held {
            self.ahead.borrow_mut().clear();
        }
        self.then(self.client.batch_execute(sql))
    }

    /// Begins a transaction: `how` is [`BEGIN`] or [`BEGIN_READ`](super::BEGIN_READ), held back to go with the
    /// transaction's first statement.
    pub(super) fn begin(&self, how: &'static str) {
        self.fresh();
        let mut ahead = self.ahead.borrow_mut();
        ahead.clear();
        ahead.push(Ahead::Begin(how));
    }

    /// Begins a write transaction ([`BEGIN`]) and locks the one row of `counter`, then runs
    /// `check` (a query of two text columns, its values written in) under the lock, all in one
    /// round trip: the head as it stands once the lock is held, and `check`'s rows.
    pub(super) fn begin_counted_then(
        &self,
        check: Option<&str>,
    ) -> Result<(i64, Vec<(String, String)>)> {
        use tokio_postgres::SimpleQueryMessage;
        self.ahead.borrow_mut().clear();
        let mut sql = format!("{BEGIN}; SELECT head FROM counter FOR UPDATE");
        if let Some(check) = check {
            sql.push_str("; ");
            sql.push_str(check);
        }
        let messages = self.then(self.client.simple_query(&sql))?;
        self.fresh();
        // The counter's row is the one row of one column; `check`'s have two.
        let mut head = None;
        let mut rows = Vec::new();
        for m in &messages {
            if let SimpleQueryMessage::Row(row) = m {
                match row.len() {
                    1 => head = row.get(0),
                    _ => {
                        if let (Some(a), Some(b)) = (row.get(0), row.get(1)) {
                            rows.push((a.to_string(), b.to_string()));
                        }
                    }
                }
            }
        }
        let head = head.ok_or_else(|| Error::Corrupt("the counter row is missing".into()))?;
        let head = head
            .parse()
            .map_err(|e| Error::Corrupt(format!("the counter's head {head:?}: {e}")))?;
        Ok((head, rows))
    }

    /// Commits a write transaction that appended events up to `head`: what is held back (the
    /// events, the last job's release), the counter raised to `head`, a wake-up for every
    /// server's tail and the COMMIT go in one round trip. Should anything before the COMMIT
    /// fail, the COMMIT is not run (a failed statement ends the simple query it is in, and
    /// one held back aborts the transaction, which the COMMIT would only roll back: its
    /// failure is the answer) and the transaction is left to roll back.
    pub(super) fn commit_head(&self, head: i64) -> Result<()> {
        self.commit_with(&format!(
            "UPDATE counter SET head = {head}; NOTIFY turnstream_events; COMMIT"
        ))
    }

    pub(super) fn commit(&self) -> Result<()> {
        self.commit_with("COMMIT")
    }

    fn commit_with(&self, sql: &str) -> Result<()> {
        if self.spoiled() {
            // PostgreSQL would answer the COMMIT of an aborted transaction by rolling it back,
            // as if it had committed: the failure is the answer, and the transaction is rolled
            // back here (a read's connection goes back to the pool with none open).
            let e = self.aborted();
            if let Err(rollback) = self.rollback() {
                tracing::debug!(error = %rollback, "journal: rollback after a failed statement failed");
            }
            return Err(e);
        }
        // The last job's release: the COMMIT ends its savepoint anyway.
        {
            let mut ahead = self.ahead.borrow_mut();
            if matches!(ahead.last(), Some(Ahead::Release)) {
                ahead.pop();
            }
        }
        self.control(sql, Held::Send)
    }

    pub(super) fn rollback(&self) -> Result<()> {
        self.control("ROLLBACK", Held::Drop)?;
        self.fresh();
        Ok(())
    }

    /// Opens the savepoint of a write job (one at a time): held back, to go with the job's
    /// first statement.
    pub(super) fn savepoint(&self) -> Result<()> {
        if self.savepoint.get() != Savepoint::None {
            return Err(Error::Corrupt("a job's savepoint is open already".into()));
        }
        self.ahead.borrow_mut().push(Ahead::Savepoint);
        self.savepoint.set(Savepoint::Held);
        Ok(())
    }

    /// Keeps what the job did: its release held back, to go with the next statement; or,
    /// where the job sent nothing, its savepoint never sent.
    pub(super) fn release_savepoint(&self) -> Result<()> {
        match self.savepoint.get() {
            Savepoint::Open => self.ahead.borrow_mut().push(Ahead::Release),
            Savepoint::Held => {
                let mut ahead = self.ahead.borrow_mut();
                let at = held_savepoint(&ahead)?;
                ahead.remove(at);
                // The events on both sides of it go in one statement again.
                if at > 0 && at < ahead.len() {
                    if let Ahead::Events(after) = ahead.remove(at) {
                        match &mut ahead[at - 1] {
                            Ahead::Events(before) => before.extend(after),
                            _ => ahead.insert(at, Ahead::Events(after)),
                        }
                    }
                }
            }
            Savepoint::None => return Err(self.aborted()),
        }
        self.savepoint.set(Savepoint::None);
        Ok(())
    }

    /// Undoes what the job did: rolled back to its savepoint on the server (which accepts
    /// statements again), or, where the job sent nothing, what it held back dropped.
    pub(super) fn rollback_to_savepoint(&self) -> Result<()> {
        let held = self.savepoint.get();
        self.savepoint.set(Savepoint::None);
        match held {
            Savepoint::Held => {
                let mut ahead = self.ahead.borrow_mut();
                let at = held_savepoint(&ahead)?;
                ahead.truncate(at);
                Ok(())
            }
            Savepoint::Open => {
                // Everything held back is the job's own, undone with it.
                self.control("ROLLBACK TO job; RELEASE job", Held::Drop)?;
                self.failed.set(false);
                Ok(())
            }
            Savepoint::None => Err(self.aborted()),
        }
    }

    fn rows(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<tokio_postgres::Row>> {
        let sql = dollar_params(sql);
        self.then(async {
            if self.statements.unnamed() {
                return self.client.query_typed(&sql, &typed(params)).await;
            }
            let stmt = self.client.prepare_cached(&sql).await?;
            let args: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
            self.client.query(&stmt, &args).await
        })
    }
}

impl Pending {
    fn extend(&mut self, other: Pending) {
        self.ids.extend(other.ids);
        self.sessions.extend(other.sessions);
        self.turns.extend(other.turns);
        self.kinds.extend(other.kinds);
        self.ts.extend(other.ts);
        self.data.extend(other.data);
    }
}

/// Where the job's savepoint is, held back.
fn held_savepoint(ahead: &[Ahead]) -> Result<usize> {
    ahead
        .iter()
        .rposition(|a| matches!(a, Ahead::Savepoint))
        .ok_or_else(|| Error::Corrupt("a held-back savepoint went missing".into()))
}

/// Each parameter with the type it is sent as: an unnamed statement has no server-inferred
/// types to consult, and every integer column of the schema is a BIGINT.
fn typed<'a>(params: &'a [Param<'a>]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|p| {
            let ty = match p {
                Param::Int(_) | Param::NullInt => Type::INT8,
                Param::Text(_) | Param::NullText => Type::TEXT,
            };
            (p as &(dyn ToSql + Sync), ty)
        })
        .collect()
}

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Int(v) if *ty == Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
            Param::Int(v) if *ty == Type::INT8 => v.to_sql(ty, out),
            Param::Text(v) if *ty != Type::INT4 && *ty != Type::INT8 => v.to_sql(ty, out),
            Param::NullInt | Param::NullText => Ok(IsNull::Yes),
            other => Err(format!("parameter {other:?} does not fit a column of type {ty}").into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::INT4 | Type::INT8 | Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME
        )
    }

    to_sql_checked!();
}

fn val(row: &tokio_postgres::Row, i: usize) -> Result<Val> {
    let ty = row.columns()[i].type_();
    Ok(if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?
            .map_or(Val::Null, Val::Int)
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into()))
    } else if *ty == Type::INT2 {
        row.try_get::<_, Option<i16>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into()))
    } else if *ty == Type::BOOL {
        row.try_get::<_, Option<bool>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into()))
    } else {
        row.try_get::<_, Option<String>>(i)?
            .map_or(Val::Null, Val::Text)
    })
}

impl Sql for PgClient {
    fn query(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.rows(sql, params)?
            .iter()
            .map(|r| {
                Ok(Row((0..r.len())
                    .map(|i| val(r, i))
                    .collect::<Result<_>>()?))
            })
            .collect()
    }

    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        let sql = dollar_params(sql);
        self.then(async {
            if self.statements.unnamed() {
                return self.client.execute_typed(&sql, &typed(params)).await;
            }
            let stmt = self.client.prepare_cached(&sql).await?;
            let args: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
            self.client.execute(&stmt, &args).await
        })
    }

    fn execute_unanswered(&self, sql: &str, params: &[Param<'_>]) -> Result<()> {
        self.ahead.borrow_mut().push(Ahead::Statement(Unanswered {
            sql: dollar_params(sql),
            params: params.iter().map(OwnedParam::of).collect(),
        }));
        Ok(())
    }

    fn insert_event(&self, e: &EventRow<'_>) -> Result<()> {
        let mut ahead = self.ahead.borrow_mut();
        if !matches!(ahead.last(), Some(Ahead::Events(_))) {
            ahead.push(Ahead::Events(Pending::default()));
        }
        let Some(Ahead::Events(p)) = ahead.last_mut() else {
            return Err(Error::Corrupt("events held back went missing".into()));
        };
        p.ids.push(e.seq);
        p.sessions.push(e.session_id.to_string());
        p.turns.push(e.turn_id.map(str::to_string));
        p.kinds.push(e.kind.to_string());
        p.ts.push(e.ts);
        p.data.push(e.data.to_string());
        Ok(())
    }

    fn for_each_event(
        &self,
        sql: &str,
        params: &[Param<'_>],
        each: &mut dyn FnMut(EventRow<'_>) -> Result<()>,
    ) -> Result<()> {
        for row in self.rows(sql, params)? {
            each(event_row(&row)?)?;
        }
        Ok(())
    }

    fn head(&self) -> Result<i64> {
        // Qualified: the writer asks outside any transaction too.
        self.query_int("SELECT head FROM turnstream.counter", &[])?
            .ok_or_else(|| Error::Corrupt("the counter row is missing".into()))
    }

    fn schema_version(&self) -> Result<i64> {
        super::schema::version(self)
    }

    fn backend(&self) -> Backend {
        Backend::Postgres
    }
}

/// The event of a row whose columns are `id, session_id, turn_id, ts, kind, data` (every query
/// of the events table that reads them back: the journal's reads and its tail).
pub(super) fn event_row(row: &tokio_postgres::Row) -> Result<EventRow<'_>, tokio_postgres::Error> {
    Ok(EventRow {
        seq: row.try_get(0)?,
        session_id: row.try_get(1)?,
        turn_id: row.try_get(2)?,
        ts: row.try_get(3)?,
        kind: row.try_get(4)?,
        data: row.try_get(5)?,
    })
}
