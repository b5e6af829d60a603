"""A message in flight, which is also the SimPy event of its next arrival."""

from __future__ import annotations


class Message:
    """One message. While it crosses a link it is its own SimPy event: the hot path then
    allocates nothing per hop (SimPy's loop needs only `callbacks` and `_ok` of an event)."""

    __slots__ = ("callbacks", "_ok", "_value", "id", "stream", "source", "t_sent", "size", "qos",
                 "retry", "topic", "hops", "path", "leg", "t_attempt", "deliver", "sn",
                 "readers")

    def __init__(self, id: int, stream: int, source: int, t_sent: float, size: int, qos: int,
                 retry: float, topic: str):
        self.callbacks: list | None = None
        self._ok = True
        self._value = None
        self.id = id
        self.stream = stream
        self.source = source
        self.t_sent = t_sent
        self.size = size
        self.qos = qos
        self.retry = retry
        self.topic = topic
        self.hops = 0
        self.path: tuple = ()
        self.leg = 0
        self.t_attempt = t_sent
        self.deliver = None
        self.sn = 0  # serial number a stateful operator's group stamps on its input
        # The groups a broker hands it to (None: every group reading its topic): a message
        # published on a node has gone to the groups with an instance there already.
        self.readers: tuple | None = None

    def copy(self) -> Message:
        twin = Message(self.id, self.stream, self.source, self.t_sent, self.size, self.qos,
                       self.retry, self.topic)
        twin.hops = self.hops
        twin.sn = self.sn
        return twin
