"""Data (s5.1): corpora read or downloaded, the joint BPE, prepared datasets, token batches."""
