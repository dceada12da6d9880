"""Demonstrations of Magnetar at work (``magnetar smart-city``)."""
