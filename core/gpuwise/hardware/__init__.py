"""What gpuwise knows of GPU models: MIG profiles and placements per model, compute capabilities,
datasheet figures, and one spelling of their names to look them up by.

Facts from NVIDIA's documentation, shared by the rules (`gpuwise.diagnose`), the planners
(`gpuwise.decide`) and the actions (`gpuwise.act`); they import nothing of gpuwise outside this package.
"""
