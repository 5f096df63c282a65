"""The egress phase: a die's AIVs issue their programs of stores, and the die's egress port
serves their requests in time order."""

from __future__ import annotations

import heapq

from ..sweep.profile import HOP_CLASSES
from .programs import Entry
from .state import COPY, Die, Run


def egress_phase(run: Run, s: int, die: Die, programs: dict[int, list[Entry]],
                 mark: int) -> None:
    """Replay every AIV's program (programs[aiv]) through die s's egress port, then end every
    AIV's phase `mark`.

    An AIV does the work before a store, waits for the fence, waits for credits (they come
    back in issue order: the oldest stores first, until this one's blocks fit), issues it, and
    then requests the port; the port serves requests in time order, ties by AIV index, one at
    a time. A store to another die leaves the port after its egress cost, arrives half its hop
    latency later and is acknowledged a full hop latency after it left; a store to the die
    itself skips the ports and is visible (and acknowledged) after the local latency.
    """
    c = run.c
    aivs = die.aivs
    heap = []
    cursor = {j: 0 for j in programs}

    def request(j: int) -> None:
        a = aivs[j]
        st, work, fence, bucket = programs[j][cursor[j]]
        a.spend(bucket, work)
        if fence and a.acks:
            a.spend("sync", max(0, max(a.acks) - a.t), waiting=True)
        blocks = st.blocks(c)
        while a.in_flight and a.in_flight_blocks + blocks > c["blocks_in_flight"]:
            ack, b = a.in_flight.popleft()
            a.in_flight_blocks -= b
            a.spend(bucket, max(0, ack - a.t))
        if st.kind == COPY and a.first_copy < 0:
            a.first_copy = a.t
        a.spend(bucket, st.cost(c, "issue"))
        heapq.heappush(heap, (a.t, j))

    for j in sorted(programs):
        if programs[j]:
            request(j)
    while heap:
        t, j = heapq.heappop(heap)
        st = programs[j][cursor[j]].store
        st.issue_end = t
        st.seq = len(die.stores)
        lat = c[f"lat_{HOP_CLASSES[st.hop]}"]
        if st.dst == s:
            st.depart = t
            st.ack = st.visible = t + c["lat_local"]
        else:
            st.depart = max(t, die.egress_free) + st.cost(c, "egress")
            die.egress_free = st.depart
            st.arrival = st.depart + lat // 2
            st.ack = st.depart + lat
        aivs[j].acks.append(st.ack)
        aivs[j].in_flight.append((st.ack, st.blocks(c)))
        aivs[j].in_flight_blocks += st.blocks(c)
        if st.kind == COPY:
            aivs[j].last_copy_ack = st.ack
        die.stores.append(st)
        cursor[j] += 1
        if cursor[j] < len(programs[j]):
            request(j)
    for a in aivs:
        a.mark(mark)
