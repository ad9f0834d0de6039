"""Alerts that reach people: rules over events, notifications, delivery, escalation."""
