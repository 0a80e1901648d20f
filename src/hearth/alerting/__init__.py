"""Alerts as signed webhooks: the configuration, the polled checks (a scheduler pass) and the sender.

The alert log itself (dedup windows, the delivery rows) is :mod:`hearth.observability.alerts`, low enough in
the layers for the task engine and the runtime to raise alerts in their own transactions.
"""
