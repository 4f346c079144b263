"""Webhooks: tenants' subscriptions, signed delivery of the events outbox, the events feed."""
