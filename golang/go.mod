module github.com/panto/panto/panto

go 1.24

require go.uber.org/goleak v1.3.0 // indirect
