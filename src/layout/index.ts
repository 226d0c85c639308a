// Placeholder: the next_id() issue fills this in (bit layouts, decodeId).
export {};
