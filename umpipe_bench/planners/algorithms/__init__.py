"""Algorithms: DGAP, TiDGAP (with stage descent), the greedy plan constructions and the tuned
TiDGAP; each is built on :mod:`..search` and :mod:`..evaluation`."""
