"""The global order of q-grams used by prefix filtering: rare first, frozen per version.

Prefix filtering is exact for *any* total order, provided the indexed side and the
probing side use the same one; it is fast only if the order puts rare q-grams first,
so that prefixes share few postings. Rarity is learned from the stream: a count
sketch of q-gram occurrences is snapshotted into an immutable :class:`OrderVersion`
after 256, 1k, 4k, 16k and 64k documents (and 16 and 64 for the flat index of
core.engine), then every ``resnapshot_every`` documents.
Each indexed document remembers its version, and a probe computes its prefix under
every version still alive in the window (rarely more than two). The order never
changes a decision, only the number of candidates to verify.

The rank of a q-gram is (frequency class, fmix64(code)): the class is
``floor(CLASSES_PER_OCTAVE * log2(count)) + 1`` of its sketched count (0 if unseen), and
fmix64 is a bijection, so the order is total.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ndd_stream.core.kernels import order_classes, order_prefix, top_bits_count
from ndd_stream.core.qgrams import Codes

SNAPSHOTS_AT = (256, 1024, 4096, 16384, 65536)
# For an index probed with whole signatures (core.engine), where a live version costs
# nothing at probe time: a first order after 16 documents, so that few documents are
# indexed under the hash order (whose prefixes hold common q-grams every probe meets).
EARLY_SNAPSHOTS_AT = (16, 64, 256, 1024, 4096, 16384, 65536)
CLASSES_PER_OCTAVE = 3  # classes per doubling of the count: finer is rarer-first (~10% fewer
# postings probed at a 50k window than 1 per doubling); classes above 63 are clipped


def _classes(counts: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint8]:
    """The frequency class of each count: 0 for 0, else
    floor(CLASSES_PER_OCTAVE * log2(count)) + 1, at most 63."""
    classes = np.zeros(counts.size, dtype=np.uint8)
    nz = counts > 0
    cls = np.floor(CLASSES_PER_OCTAVE * np.log2(counts[nz])) + 1
    classes[nz] = np.minimum(cls, 63).astype(np.uint8)
    return classes


# The classes of the counts below _SMALL, looked up: a snapshot reads 2**bits counters
# (1M), most of them small, ~10x faster than a log2 of each.
_SMALL = 1 << 16
_SMALL_CLASSES = _classes(np.arange(_SMALL, dtype=np.uint32))


@dataclass(frozen=True)
class OrderVersion:
    """An immutable rarity table: ``classes[mixed >> shift]`` is a q-gram's class."""

    number: int
    classes: npt.NDArray[np.uint8] | None  # None: no statistics yet, pure hash order
    shift: int

    def rank(self, mixed: Codes) -> Codes:
        """Composite rank (class in the top 6 bits, then the mixed code's top 58 bits)."""
        if self.classes is None:
            return mixed
        cls = self.classes[mixed >> np.uint64(self.shift)].astype(np.uint64)
        return (cls << np.uint64(58)) | (mixed >> np.uint64(6))

    def prefix(self, mixed: Codes, length: int) -> Codes:
        """The ``length`` smallest elements of ``mixed`` under this order (any order within):
        the smallest by (class, mixed value), as the composite rank with ties broken by the
        full mixed value gives (in C when the kernels are built)."""
        if length >= mixed.size:
            return mixed
        if length <= 0:
            return mixed[:0]
        if self.classes is None:
            return np.partition(mixed, length - 1)[:length]
        fast = order_prefix(mixed, self.classes, self.shift, length)
        if fast is not None:
            return fast
        rank = self.rank(mixed)
        part = np.argpartition(rank, length - 1)
        chosen = part[:length]
        kth = rank[part[length - 1]]
        if np.count_nonzero(rank == kth) > 1:
            # Two codes share a rank (their mixed values agree in the top 58 bits, p ~ 2**-58):
            # break the tie by the full mixed value so both sides pick the same prefix.
            order = np.lexsort((mixed, rank))
            chosen = order[:length]
        return mixed[chosen]


class FrequencyBook:
    """Counts q-gram occurrences in a sketch and hands out order versions."""

    def __init__(self, bits: int = 20, resnapshot_every: int = 100_000,
                 snapshots_at: tuple[int, ...] = SNAPSHOTS_AT) -> None:
        self._bits = bits
        self._snapshots_at = snapshots_at
        self._shift = 64 - bits
        self._counts = np.zeros(1 << bits, dtype=np.uint32)
        self._documents = 0
        self._resnapshot_every = resnapshot_every
        self._next_snapshot = snapshots_at[0]
        self.current = OrderVersion(0, None, self._shift)

    @property
    def documents(self) -> int:
        return self._documents

    @property
    def counts(self) -> npt.NDArray[np.uint32]:
        """The sketch's counters (one per top-bits slot), for a caller that counts in C
        (core.engine's add) and then calls :meth:`tally`."""
        return self._counts

    @property
    def shift(self) -> int:
        return self._shift

    def count(self, mixed: Codes) -> None:
        """Record one document's distinct q-grams; may freeze a new current version."""
        top_bits_count(self._counts, mixed, self._shift)
        self.tally()

    @property
    def snapshot_due(self) -> bool:
        """Whether the next :meth:`tally` freezes a new version (it reads :attr:`counts`)."""
        return self._documents + 1 >= self._next_snapshot

    def tally(self) -> None:
        """One more document counted into :attr:`counts`; may freeze a new version."""
        self._documents += 1
        if self._documents >= self._next_snapshot:
            self.snapshot()

    def snapshot(self) -> OrderVersion:
        """Freeze the current counts into a new version and make it current."""
        counts = self._counts
        found = order_classes(counts, _SMALL_CLASSES)  # in C: the small counts' classes
        if found is None:
            classes = _SMALL_CLASSES[np.minimum(counts, np.uint32(_SMALL - 1))]
        else:
            classes = found[0]
        if found is None or found[1]:
            big = np.flatnonzero(counts >= _SMALL)
            classes[big] = _classes(counts[big])
        self.current = OrderVersion(self.current.number + 1, classes, self._shift)
        later = [n for n in self._snapshots_at if n > self._documents]
        self._next_snapshot = (
            later[0] if later else self._documents + self._resnapshot_every
        )
        return self.current
