"""The phases of a study, composed by ``tuner.loop.StudyRunner``.

``baseline`` (trial 0, drift), ``trial`` (propose, check, screen, apply + measure, judge,
score, tell), ``confirm`` (confirmation, keep), ``tracking`` (the MLflow parent run). Each is a
set of functions over the runner's state; ``policy`` says what differs between ``ecntune run``
and a scale-out worker.
"""
