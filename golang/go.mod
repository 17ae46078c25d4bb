module github.com/panto/panto/golang

go 1.24

require go.uber.org/goleak v1.3.0 // indirect
