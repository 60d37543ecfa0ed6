"""Where a suspended kernel's state waits: host memory that outlives the kernel, the
write-behind that makes a staged checkpoint durable, and CUDA park."""
