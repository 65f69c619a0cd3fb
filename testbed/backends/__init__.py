"""Network backends: what carries a repetition's messages and returns their arrivals and the fabric's counters."""
