"""History search: a user's earlier messages by keyword and meaning, fused by rank.

The vector engine answers both (ADR 0013): the extraction worker writes each message into
the user's message collection (point id = message id) with a dense
vector of "(8 May 2023) Ana: <content>" and a BM25 sparse vector of its words, and one
request returns the user's best 4k by meaning and by words. Messages the engine does not
hold yet (`Message.indexed_at` unset: the worker is behind) are found by SQL full-text,
whose rank joins the words' list, so a message is findable by its words from the moment
it is committed. When the engine cannot answer — the process cannot open the embedded
folder, or the collection predates sparse vectors (`tiermem reindex` remakes it) — SQL
full-text (SQLite FTS5 bm25 or PostgreSQL ts_rank, migration 0003) stands in for the
words' list, as before ADR 0013.

The lists are fused: on long chat histories keyword search wins single-hop and date
questions, vectors win paraphrases, and their top lists overlap little, so the fusion beats
either alone (measured on a public multi-session chat benchmark). The engine's answer is
fused by score (ADR 0014: BM25 over the best candidate's + a weight × cosine, plus a bonus
when the query names the speaker), SQL full-text's by reciprocal rank (its scores do not
compare with the engine's). Every hit keeps its rank and score in each list.

The modules: `collection` (whether the user's message collection holds the words),
`indexing` (the worker writing messages into it), `words` (a query's terms), `fulltext`
(SQL full-text), `fusion` (the lists fused: pure functions) and `search` (the search
itself and the hits clients see).
"""
