"""``ecntune diagnose``: find what congestion-control tuning cannot fix, bottom-up.

Layers run in order (physical, host, IP, RDMA, fabric, collectives); each check reads real tool
output (or the simulator's counters) and returns ``Finding`` rows (``tuner.diagnose.finding``).
"""
