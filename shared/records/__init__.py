"""What the write path leaves in SQL, below every domain package: turns stored with one
extraction run per user turn (`ingest`), runs and jobs (`runs`), the outbox that resends runs
lost on the way to the broker (`outbox`), replay jobs (`replay`), tenants and keys (`tenancy`)."""
