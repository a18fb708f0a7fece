"""Running the integration: the recorder, the three stages, the run log and the demo."""
