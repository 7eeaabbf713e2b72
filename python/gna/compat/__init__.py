"""Compatibility layers: other libraries' APIs on gna's operators.

gna.compat.natten       NATTEN's legacy functional API (0.14 to 0.17) on gna.unfused
gna.compat.natten_shim  install() provides a `natten` module backed by gna.compat.natten, so
                        that code importing NATTEN (Hugging Face transformers' DiNAT) runs on gna
"""
