namespace gna {}
