-- What the agent said: text blocks of assistant events (main agent and sub-agents) and the text of
-- every `result` event. Not tool results, not the hook note, not thinking blocks.
CREATE OR REPLACE TEMP VIEW assistant_text AS
SELECT run_id, seq, parent_tool_use_id, type, text
FROM events
WHERE text IS NOT NULL AND text <> ''
  AND ((type = 'assistant' AND block_type = 'text') OR type = 'result');
