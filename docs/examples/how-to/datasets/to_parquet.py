# to_parquet.py: rows.csv -> rows.parquet (pip install 'osmosis-run[parquet]' brings pyarrow)
import pyarrow.csv
import pyarrow.parquet

pyarrow.parquet.write_table(pyarrow.csv.read_csv("rows.csv"), "rows.parquet")
