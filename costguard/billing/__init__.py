"""Bills as the clouds write them: reading FOCUS, AWS CUR and Google Cloud exports in bounded
memory (focus_files, native_exports, focus_columns with its digest helper, bounded_input),
each line's key and the store of day sums (lines, line_keys, store), the rates a bill teaches
(rates), and the bill beside the estimates (compare); `costguard billing` (commands).
Money estimated from inventory (prices, accrual, budgets, anomalies) is costguard.costs."""
