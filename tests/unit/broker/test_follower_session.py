"""The follower's fetch session with a leader: a full request first, then only what changed and
what to forget; back to a full request after a session error or a broken connection."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from weir.broker.follower_session import FollowerFetchSession, PartitionFetchState

NONE = ErrorCode.none


def state(offset: int, epoch: int = 3) -> PartitionFetchState:
    return PartitionFetchState(offset, epoch, epoch, 0, 1 << 20)


A, B, C = ("t", 0), ("t", 1), ("u", 0)


def established(session_id: int = 77) -> FollowerFetchSession:
    session = FollowerFetchSession()
    first = session.next_request({A: state(0), B: state(0)})
    assert session.handle_response(first, NONE, session_id)
    return session


def test_the_first_request_is_full_and_asks_for_a_session() -> None:
    session = FollowerFetchSession()
    request = session.next_request({A: state(0), B: state(5)})
    assert (request.session_id, request.epoch) == (0, 0)
    assert request.to_send == {A: state(0), B: state(5)} and request.to_forget == []


def test_then_only_changed_partitions_go_with_increasing_epochs() -> None:
    session = established()
    unchanged = session.next_request({A: state(0), B: state(0)})
    assert (unchanged.session_id, unchanged.epoch, unchanged.to_send) == (77, 1, {})
    assert session.handle_response(unchanged, NONE, 77)
    moved = session.next_request({A: state(9), B: state(0), C: state(0)})
    assert moved.epoch == 2 and moved.to_send == {A: state(9), C: state(0)}
    assert session.handle_response(moved, NONE, 77)
    new_epoch = session.next_request({A: state(9, epoch=4), B: state(0), C: state(0)})
    assert new_epoch.epoch == 3 and new_epoch.to_send == {A: state(9, epoch=4)}


def test_partitions_no_longer_followed_are_forgotten_once() -> None:
    session = established()
    dropping = session.next_request({A: state(0)})
    assert dropping.to_forget == [B] and dropping.to_send == {}
    assert session.handle_response(dropping, NONE, 77)
    assert session.next_request({A: state(0)}).to_forget == []


def test_a_request_not_answered_is_sent_again() -> None:
    session = established()
    session.next_request({A: state(4), B: state(0)})  # built, never answered
    assert session.next_request({A: state(4), B: state(0)}).to_send == {A: state(4)}


def test_session_not_found_starts_over_with_a_new_session() -> None:
    session = established()
    request = session.next_request({A: state(1), B: state(0)})
    assert not session.handle_response(request, ErrorCode.fetch_session_id_not_found, 0)
    again = session.next_request({A: state(1), B: state(0)})
    assert (again.session_id, again.epoch) == (0, 0) and set(again.to_send) == {A, B}


def test_invalid_epoch_starts_over_closing_the_old_session() -> None:
    session = established()
    request = session.next_request({A: state(1), B: state(0)})
    assert not session.handle_response(request, ErrorCode.invalid_fetch_session_epoch, 0)
    again = session.next_request({A: state(1), B: state(0)})
    assert (again.session_id, again.epoch) == (77, 0) and set(again.to_send) == {A, B}
    assert session.handle_response(again, NONE, 78)
    assert (session.session_id, session.epoch) == (78, 1)


def test_a_broken_exchange_starts_over() -> None:
    session = established()
    session.next_request({A: state(1), B: state(0)})
    session.handle_error()
    again = session.next_request({A: state(1), B: state(0)})
    assert again.epoch == 0 and set(again.to_send) == {A, B}


def test_no_session_from_the_leader_keeps_requests_full() -> None:
    session = FollowerFetchSession()
    first = session.next_request({A: state(0)})
    assert session.handle_response(first, NONE, 0)  # the leader's cache is full
    second = session.next_request({A: state(0)})
    assert (second.session_id, second.epoch, second.to_send) == (0, 0, {A: state(0)})
