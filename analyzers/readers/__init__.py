"""The readers: one package per profiler format, each turning a raw file into frames (an ``Extract``)."""
