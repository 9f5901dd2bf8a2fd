-- Every tool_use block (sub-agents' included), with the input fields the rules read.
CREATE OR REPLACE TEMP VIEW tool_calls AS
SELECT
    run_id,
    seq,
    tool_name,
    parent_tool_use_id,
    json_extract_string(tool_input, '$.command') AS command,
    coalesce(json_extract_string(tool_input, '$.file_path'),
             json_extract_string(tool_input, '$.notebook_path')) AS file_path,
    json_extract_string(tool_input, '$.path') AS search_path,
    json_extract_string(tool_input, '$.pattern') AS pattern,
    json_extract_string(tool_input, '$.skill') AS skill
FROM events
WHERE block_type = 'tool_use';
