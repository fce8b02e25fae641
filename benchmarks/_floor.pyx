# cython: language_level=3
"""Benchmark-only yardstick: a Cython method with RecordBatchBuilder.append's signature
that does nothing, to show what the Python loop and the call alone cost per record."""


cdef class NoopBuilder:
    cdef long n

    def append(self, value, key=None, timestamp=None, headers=None):
        self.n += 1

    def build(self, base_offset=0):
        return self.n
