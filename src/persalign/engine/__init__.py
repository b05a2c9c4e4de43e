"""The one generation engine every deployment uses: decoding (greedy, sampling, stops), batching, the prefix
cache, teacher-forced scoring, and the cost model with the work meter that counts what each of them did."""
