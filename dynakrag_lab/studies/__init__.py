"""Offline studies of the controller: the control diagnosis, horizon and stop-target studies
on saved trajectories, answer labels for them, the answer-stage rule and run behaviour."""
