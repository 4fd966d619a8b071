"""Transaction control the session answers itself: BEGIN, COMMIT / END, ROLLBACK / ABORT,
SAVEPOINT, RELEASE and ROLLBACK TO SAVEPOINT (DuckDB has no nested transactions)."""
from __future__ import annotations

from gateway.pgwire import errors as E
from gateway.pgwire.results import Done
from gateway.sessions.portals import TxStatus


def warn(session, sqlstate: str, message: str) -> None:
    session.notices.append(("WARNING", sqlstate, message))


async def begin(session, p, params):
    if session.status != TxStatus.IDLE:
        warn(session, "25001", "there is already a transaction in progress")
        return Done("BEGIN")
    await session.in_thread(session.begin)
    return Done("BEGIN")


async def commit(session, p, params):
    if session.status == TxStatus.IDLE:
        warn(session, "25P01", "there is no transaction in progress")
        return Done("COMMIT")
    return Done(await session.in_thread(session.end_transaction, True))


async def rollback(session, p, params):
    if session.status == TxStatus.IDLE:
        warn(session, "25P01", "there is no transaction in progress")
        return Done("ROLLBACK")
    await session.in_thread(session.end_transaction, False)
    return Done("ROLLBACK")


def _need_block(session, what: str) -> None:
    if session.status == TxStatus.IDLE:
        raise E.NoActiveTransaction(f"{what} can only be used in transaction blocks")


async def savepoint(session, p, params):
    _need_block(session, "SAVEPOINT")
    session.savepoints.append((p.command.name, session.writes_in_tx))
    return Done("SAVEPOINT")


def _find_savepoint(session, name: str) -> int:
    for i in range(len(session.savepoints) - 1, -1, -1):
        if session.savepoints[i][0] == name:
            return i
    raise E.InvalidSavepoint(f'savepoint "{name}" does not exist')


async def release(session, p, params):
    _need_block(session, "RELEASE SAVEPOINT")
    del session.savepoints[_find_savepoint(session, p.command.savepoint):]
    return Done("RELEASE")


async def rollback_to(session, p, params):
    """DuckDB has no nested transactions: a savepoint can be restored only while the transaction
    has written nothing, by restarting it (reads see a fresh snapshot)."""
    _need_block(session, "ROLLBACK TO SAVEPOINT")
    i = _find_savepoint(session, p.command.savepoint)
    if session.writes_in_tx:
        raise E.FeatureNotSupported(
            "ROLLBACK TO SAVEPOINT after writes is not supported by cqgate",
            hint="ROLLBACK the whole transaction and run it again.")
    del session.savepoints[i + 1:]
    kept = list(session.savepoints)

    def restart():
        try:
            session.con.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the DuckDB transaction may already be gone
            pass
        session.con.execute("BEGIN TRANSACTION")

    await session.in_thread(restart)
    session.live.forget()          # what it registered in the transaction is gone too
    session.status = TxStatus.IN_BLOCK
    session.savepoints[:] = kept
    return Done("ROLLBACK")
