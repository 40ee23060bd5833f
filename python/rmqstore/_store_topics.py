"""Topic deletion on :class:`rmqstore.MessageStore` (a mixin of it): RocketMQ's
``DefaultMessageStore.deleteTopics``, ``cleanUnusedTopic`` and ``cleanExpiredConsumerQueue``,
with what the broker does around the first (``AdminBrokerProcessor.deleteTopicInBroker``).

The store's part is Rust (``Store.delete_topics`` and the others: the topic's consume queues,
files and table, and its entries of the commitlog's topic-queue table, so a later put starts
again at queue offset 0; see ``rust/core/src/store/topics_clean.rs``). What a broker also
removes when it deletes a topic, and rmqstore keeps in the same files, goes here: the topic's
entry of ``config/topics.json`` (``TopicConfigManager.deleteTopicConfig``) and its consumer
offsets in ``config/consumerOffset.json`` (``ConsumerOffsetManager.cleanOffsetByTopic``).
The commitlog records and index keys stay until they expire, as in RocketMQ.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    unwritable_error,
)
from .topics import is_system_topic

if TYPE_CHECKING:
    from ._rmqstore import Store
    from ._services import TopicConfigService
    from .offsets import ConsumerOffsetManager

__all__ = ["TopicDeletionMixin"]

log = logging.getLogger("rmqstore.store")


def _topic_names(value: object, name: str) -> list[str]:
    """An iterable of topic names (``str``), checked; a lone ``str`` or bytes is refused."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(
            f"{name} must be an iterable of topic names (str), not {type(value).__name__}"
        )
    out: list[str] = []
    for topic in value:
        if not isinstance(topic, str):
            raise ArgumentTypeError(
                f"every topic of {name} must be a str, not {type(topic).__name__}"
            )
        out.append(topic)
    return out


class TopicDeletionMixin:
    """Topic deletion of :class:`rmqstore.MessageStore` (see the module documentation)."""

    _core: Store
    _forked: bool
    _offsets: ConsumerOffsetManager | None
    _topic_config: TopicConfigService | None

    def _check_topic_deletion(self, what: str) -> None:
        err = unwritable_error(what, forked=self._forked, read_only=self._core.read_only)
        if err is not None:
            raise err

    @contextlib.contextmanager
    def _topic_config_held(self) -> Iterator[None]:
        """Keeps the topic config service from writing back, from a look it took before the
        deletion, a topic being deleted."""
        if self._topic_config is None:
            yield
            return
        with self._topic_config.sync_lock:
            yield

    def _forget_topics(self, topics: Iterable[str]) -> None:
        """The broker's part of a deletion: topics.json entries and consumer offsets."""
        gone = list(topics)
        if not gone:
            return
        if self._topic_config is not None:
            self._topic_config.manager.delete_topic_configs(gone)
        if self._offsets is not None:
            self._offsets.clean_offsets(dict.fromkeys(gone))

    def delete_topics(self, topics: Iterable[str]) -> int:
        """Deletes topics (``DefaultMessageStore.deleteTopics`` as the broker's ``deleteTopic``
        calls it): their consume queues (files and tables), their queue offsets (a later put
        starts again at queue offset 0), their ``topics.json`` entries and their consumer
        offsets. Returns how many of them had consume queues.

        Runs alone: calls in flight finish first and puts wait until it is done (the commitlog
        is flushed and dispatched to its end first, so no message of the topics put before it
        reappears later, not even after a crash). A reader holding one of the queues is never
        broken. An empty name or a system topic (``TopicValidator.isSystemTopic``:
        ``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_*``, ...) raises
        :class:`~rmqstore.errors.InvalidArgumentError` and nothing is deleted, as the broker
        refuses such a request; a topic without queues is passed over (its ``topics.json``
        entry and consumer offsets still go). A read-only store raises
        :class:`~rmqstore.errors.StoreReadOnlyError`.
        """
        names = _topic_names(topics, "topics")
        for topic in names:
            if not topic.strip():
                raise InvalidArgumentError("topics: the specified topic is blank")
            if is_system_topic(topic):
                raise InvalidArgumentError(
                    f"topics: the topic {topic[:200]!r} is a system topic, which cannot be deleted"
                )
        self._check_topic_deletion("delete_topics")
        if not names:
            return 0
        with self._topic_config_held():
            deleted = self._core.delete_topics(names)
            self._forget_topics(dict.fromkeys(names))
        log.info("deleted topics %s (%d had consume queues)", ", ".join(names[:20]), deleted)
        return deleted

    def clean_unused_topics(self, keep: Iterable[str]) -> int:
        """``DefaultMessageStore.cleanUnusedTopic``: deletes, as :meth:`delete_topics` does,
        every topic with consume queues that ``keep`` does not name; system topics and LMQ
        topics (``%LMQ%...``) are always kept. Returns how many topics were deleted."""
        kept = _topic_names(keep, "keep")
        self._check_topic_deletion("clean_unused_topics")
        with self._topic_config_held():
            deleted = self._core.clean_unused_topics(kept)
            self._forget_topics(deleted)
        if deleted:
            log.info("deleted unused topics %s", ", ".join(deleted[:20]))
        return len(deleted)

    def clean_expired_consumer_queues(self) -> int:
        """``DefaultMessageStore.cleanExpiredConsumerQueue``: destroys the consume queue of
        every non-system topic whose messages have all expired (its last message lies before the
        commitlog's first segment), and the topic's folder once it has no queue left. Such a
        queue starts again at queue offset 0, so the consumer offsets committed on it (which
        count in the old numbering) go too; ``topics.json`` is left as it is. Returns how many
        queues were destroyed. Runs alone, as :meth:`delete_topics`."""
        self._check_topic_deletion("clean_expired_consumer_queues")
        destroyed = self._core.clean_expired_consumer_queues()
        if destroyed and self._offsets is not None:
            queues: dict[str, set[int]] = {}
            for topic, queue_id in destroyed:
                queues.setdefault(topic, set()).add(queue_id)
            self._offsets.clean_offsets(dict(queues))
        return len(destroyed)
